/**
 * The aggregated layout's generated RBAC and monitoring on its running platform: sandbox-apiserver runs on a
 * ServiceAccount token bound to deploy/aggregated/rbac.yaml (generated from src/deploy/rbac.ts, as the chart's
 * roles are), serves sandboxes through the aggregator, and none of its requests was refused; every dashboard and
 * alert metric of sandbox-apiserver is on its real /metrics.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { request as httpsRequest } from 'node:https';
import { before, describe, it } from 'node:test';
import { aggregatedNamespace, getAggregated, sandboxManifest, type AggregatedEnv } from '../support/aggregated.js';
import { assertExported, parseShippedExpressions, refusedRequests } from '../support/promql.js';

describe('aggregated layout: sandbox-apiserver on the generated RBAC', () => {
  let env: AggregatedEnv;
  before(async () => {
    env = await getAggregated();
  });

  async function metrics(): Promise<string> {
    const ca = await readFile(env.apiserver.caFile);
    const [cert, key] = await Promise.all([readFile(env.cluster.pki.admin.cert), readFile(env.cluster.pki.admin.key)]);
    return new Promise<string>((resolve, reject) => {
      const req = httpsRequest(`https://${env.apiserver.address}/metrics`, { ca, cert, key }, (res) => {
        let body = '';
        res.on('data', (d: Buffer) => (body += d.toString()));
        res.on('end', () =>
          res.statusCode === 200 ? resolve(body) : reject(new Error(`/metrics: ${res.statusCode} ${body}`)),
        );
      });
      req.on('error', reject);
      req.end();
    });
  }

  it('serves a create, get, list and delete, and no request of its own was refused', { timeout: 120_000 }, async () => {
    const ns = await aggregatedNamespace('rbac');
    try {
      await env.kubectl(['create', '-n', ns.name, '-f', '-'], JSON.stringify(sandboxManifest('s1')));
      await env.kubectl(['get', '-n', ns.name, 'sandbox', 's1']);
      assert.match(await env.kubectl(['get', '-n', ns.name, 'sandboxes', '-o', 'name']), /s1/);
      await env.kubectl(['delete', '-n', ns.name, 'sandbox', 's1']);
    } finally {
      await ns.cleanup();
    }
    const text = await metrics();
    assert.match(text, /^rest_client_requests_total\{/m, 'the server counts its own requests');
    assert.deepEqual(refusedRequests(text), []);
  });

  it('every dashboard and alert metric of sandbox-apiserver is on its /metrics', { timeout: 15 * 60_000 }, async () => {
    assertExported(await parseShippedExpressions(), 'apiserver', await metrics());
  });
});
