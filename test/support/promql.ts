/**
 * The dashboard's and alerts' PromQL, parsed by Prometheus's own parser (test/deploy/promql-shim, built against
 * github.com/prometheus/prometheus), and checks of the metric names it selects against a component's /metrics.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFile, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { allExpressions, PROMETHEUS_SERIES } from '../../src/deploy/monitoring.js';

export type Component = 'operator' | 'sandboxd' | 'apiserver';

export interface ParsedExpression {
  where: string;
  expr: string;
  metrics: string[];
  error?: string;
}

/** Build the shim (Go module cache, or the proxy the first time) and parse every shipped expression. */
export async function parseShippedExpressions(): Promise<ParsedExpression[]> {
  const dir = await mkdtemp(join(tmpdir(), 'sbx-promql-'));
  try {
    const src = new URL('../deploy/promql-shim/', import.meta.url);
    for (const f of ['main.go', 'go.mod', 'go.sum']) await copyFile(new URL(f, src), join(dir, f));
    const built = spawnSync('go', ['build', '-trimpath', '-o', join(dir, 'promql-shim'), '.'], {
      cwd: dir,
      encoding: 'utf8',
      env: { ...process.env, CGO_ENABLED: '0' },
    });
    assert.equal(built.status, 0, `go build promql-shim: ${built.stderr}`);
    const exprs = allExpressions();
    const out = spawnSync(join(dir, 'promql-shim'), [], {
      input: JSON.stringify(exprs.map((e) => e.expr)),
      encoding: 'utf8',
    });
    assert.equal(out.status, 0, out.stderr);
    const results = JSON.parse(out.stdout) as Array<{ metrics: string[]; error?: string }>;
    return exprs.map((e, i) => ({ ...e, ...results[i]! }));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Which component a metric belongs to, by the prefixes each component's metrics carry. */
export function ownerOf(metric: string): Component {
  if (metric.startsWith('sandboxd_')) return 'sandboxd';
  if (metric.startsWith('apiserver_') || metric.startsWith('sandbox_apiserver_')) return 'apiserver';
  return 'operator';
}

/** Metric names of an exposition, with the series names a histogram or summary adds. */
export function exportedNames(text: string): Set<string> {
  const names = new Set<string>();
  for (const m of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
    const [, name, type] = m as unknown as [string, string, string];
    names.add(name);
    if (type === 'histogram') for (const s of ['_bucket', '_sum', '_count']) names.add(`${name}${s}`);
    if (type === 'summary') for (const s of ['_sum', '_count']) names.add(`${name}${s}`);
  }
  return names;
}

/** Every metric of `component` the expressions select is in its exposition `text`. */
export function assertExported(parsed: readonly ParsedExpression[], component: Component, text: string): void {
  const names = exportedNames(text);
  assert.ok(names.size > 5, `${component} exports ${names.size} metrics`);
  let checked = 0;
  for (const p of parsed)
    for (const m of p.metrics) {
      if ((PROMETHEUS_SERIES as readonly string[]).includes(m) || ownerOf(m) !== component) continue;
      checked++;
      assert.ok(names.has(m), `${p.where} uses ${m}, which ${component}'s /metrics does not export`);
    }
  assert.ok(checked > 0, `some expression uses ${component}'s metrics`);
}

/** The rest_client_requests_total series of an exposition answered 403. */
export function refusedRequests(text: string): string[] {
  return text.split('\n').filter((l) => l.startsWith('rest_client_requests_total{') && l.includes('code="403"'));
}
