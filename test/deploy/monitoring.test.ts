/**
 * Every dashboard and alert expression parses with Prometheus's own PromQL parser (test/deploy/promql-shim, built
 * against github.com/prometheus/prometheus) and selects only metrics the components export, checked against the
 * real /metrics of each: the operator (with its conversion webhook) and sandboxd as they run, sandbox-apiserver
 * when it can be started on this branch.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { copyFile, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { allExpressions, PROMETHEUS_SERIES } from '../../src/deploy/monitoring.js';
import { createCertificateAuthority, issueCertificate } from '../../src/pki/index.js';
import { silentLogger } from '../../src/log/logger.js';
import { createTestNamespace, getTestCluster } from '../support/cluster.js';
import { eventually } from '../support/eventually.js';
import { startTestOperator } from '../support/operator.js';
import { SandboxdProcess } from '../support/sandboxd-daemon.js';

type Component = 'operator' | 'sandboxd' | 'apiserver';

/** Which component a metric belongs to, by the prefixes each component's metrics carry. */
function ownerOf(metric: string): Component {
  if (metric.startsWith('sandboxd_')) return 'sandboxd';
  if (metric.startsWith('apiserver_') || metric.startsWith('sandbox_apiserver_')) return 'apiserver';
  return 'operator';
}

/** Metric names of an exposition, with the series names a histogram or summary adds. */
function exportedNames(text: string): Set<string> {
  const names = new Set<string>();
  for (const m of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
    const [, name, type] = m as unknown as [string, string, string];
    names.add(name);
    if (type === 'histogram') for (const s of ['_bucket', '_sum', '_count']) names.add(`${name}${s}`);
    if (type === 'summary') for (const s of ['_sum', '_count']) names.add(`${name}${s}`);
  }
  return names;
}

describe('dashboard and alert expressions use only exported metrics', () => {
  let dir: string;
  let parsed: Array<{ where: string; expr: string; metrics: string[]; error?: string }>;
  const exported: Partial<Record<Component, Set<string>>> = {};

  before(
    async () => {
      dir = await mkdtemp(join(tmpdir(), 'sbx-promql-'));
      const src = new URL('./promql-shim/', import.meta.url);
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
      parsed = exprs.map((e, i) => ({ ...e, ...results[i]! }));
    },
    { timeout: 15 * 60_000 },
  );
  after(() => rm(dir, { recursive: true, force: true }));

  it('every expression parses and names its metrics', () => {
    assert.ok(parsed.length >= 15, `${parsed.length} expressions`);
    for (const p of parsed) {
      assert.equal(p.error, undefined, `${p.where}: ${p.expr}: ${p.error}`);
      assert.ok(p.metrics.length > 0, `${p.where} selects a metric`);
    }
  });

  it("the operator's metrics are on its /metrics (conversion webhook on)", async () => {
    const ns = await createTestNamespace('metrics');
    const certDir = join(dir, 'webhook');
    const ca = createCertificateAuthority({ commonName: 'test-ca' }, { validityMs: 86_400_000 });
    const leaf = issueCertificate(ca, {
      subject: { commonName: 'sandbox-webhook-service' },
      usages: ['server'],
      subjectAltNames: ['127.0.0.1'],
      validityMs: 86_400_000,
    });
    await mkdir(certDir, { recursive: true });
    await writeFile(join(certDir, 'tls.crt'), leaf.certPem);
    await writeFile(join(certDir, 'tls.key'), leaf.keyPem);
    const op = await startTestOperator(ns.name, {
      enableWebhook: true,
      manageWebhookCerts: false,
      webhookCertDir: certDir,
      webhookHost: '127.0.0.1',
      webhookPort: 0,
    });
    try {
      const addr = await eventually(() => op.manager.boundAddresses.metrics, {
        until: (a) => a !== undefined,
        what: 'the metrics server bound',
        timeoutMs: 30_000,
      });
      const text = await (await fetch(`http://${addr}/metrics`)).text();
      exported.operator = exportedNames(text);
      const expiry = /^agent_sandbox_webhook_certificate_expiry_timestamp_seconds (\S+)$/m.exec(text)?.[1];
      assert.ok(
        expiry && Math.abs(Number(expiry) * 1000 - (Date.now() + 86_400_000)) < 120_000,
        `cert expiry ${expiry}`,
      );
    } finally {
      await op.stop();
      await ns.cleanup();
    }
    assertOwned('operator');
  });

  it("sandboxd's metrics are on its /metrics", async () => {
    const token = randomBytes(16).toString('hex');
    const d = await SandboxdProcess.create(`metrics-${randomBytes(3).toString('hex')}`, token);
    try {
      await d.start(['--vk-nodes=']);
      const res = await fetch(`${d.base}/metrics`, { headers: { authorization: `Bearer ${token}` } });
      assert.equal(res.status, 200);
      exported.sandboxd = exportedNames(await res.text());
    } finally {
      await d.remove();
    }
    assertOwned('sandboxd');
  });

  it("sandbox-apiserver's metrics are in the registry its /metrics serves", async (t) => {
    const build = await import('../../src/apiserver/build.js').catch((err: unknown) => err as Error);
    if (build instanceof Error) {
      t.skip(
        `sandbox-apiserver does not load on this branch yet (${build.message.split('\n')[0]}); its names stay unchecked`,
      );
      return;
    }
    const { defaultApiServerConfig } = await import('../../src/apiserver/options.js');
    const cluster = await getTestCluster();
    const server = await build.buildApiServer(
      defaultApiServerConfig({
        kubeconfig: cluster.kubeconfigPath,
        bindAddress: '127.0.0.1',
        securePort: 0,
        certDir: join(dir, 'apiserver-certs'),
      }),
      silentLogger,
    );
    const stop = new AbortController();
    const running = server.run(stop.signal);
    try {
      exported.apiserver = exportedNames(await server.registry.metrics());
    } finally {
      stop.abort();
      await running;
    }
    assertOwned('apiserver');
  });

  function assertOwned(component: Component) {
    const names = exported[component]!;
    assert.ok(names.size > 5, `${component} exports ${names.size} metrics`);
    for (const p of parsed)
      for (const m of p.metrics) {
        if ((PROMETHEUS_SERIES as readonly string[]).includes(m) || ownerOf(m) !== component) continue;
        assert.ok(names.has(m), `${p.where} uses ${m}, which ${component}'s /metrics does not export`);
      }
  }
});
