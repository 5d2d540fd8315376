/**
 * Every dashboard and alert expression parses with Prometheus's own PromQL parser and selects only metrics the
 * components export, checked against what each really serves: the operator's /metrics (conversion webhook on) and
 * sandboxd's /metrics here, sandbox-apiserver's /metrics on the aggregated platform (test/aggregated/deploy.test.ts).
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { createCertificateAuthority, issueCertificate } from '../../src/pki/index.js';
import { createTestNamespace } from '../support/cluster.js';
import { eventually } from '../support/eventually.js';
import { startTestOperator } from '../support/operator.js';
import { assertExported, parseShippedExpressions, refusedRequests, type ParsedExpression } from '../support/promql.js';
import { SandboxdProcess } from '../support/sandboxd-daemon.js';

describe('dashboard and alert expressions use only exported metrics', () => {
  let dir: string;
  let parsed: ParsedExpression[];

  before(
    async () => {
      dir = await mkdtemp(join(tmpdir(), 'sbx-monitoring-'));
      parsed = await parseShippedExpressions();
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
      assertExported(parsed, 'operator', text);
      const expiry = /^agent_sandbox_webhook_certificate_expiry_timestamp_seconds (\S+)$/m.exec(text)?.[1];
      assert.ok(
        expiry && Math.abs(Number(expiry) * 1000 - (Date.now() + 86_400_000)) < 120_000,
        `cert expiry ${expiry}`,
      );
      assert.deepEqual(refusedRequests(text), []);
    } finally {
      await op.stop();
      await ns.cleanup();
    }
  });

  it("sandboxd's metrics are on its /metrics", async () => {
    const token = randomBytes(16).toString('hex');
    const d = await SandboxdProcess.create(`metrics-${randomBytes(3).toString('hex')}`, token);
    try {
      await d.start(['--vk-nodes=']);
      const res = await fetch(`${d.base}/metrics`, { headers: { authorization: `Bearer ${token}` } });
      assert.equal(res.status, 200);
      const text = await res.text();
      assertExported(parsed, 'sandboxd', text);
      assert.match(text, /^sandboxd_vm_memory_bytes\{measure="pss"\} 0$/m, 'no VM, no memory');
    } finally {
      await d.remove();
    }
  });
});
