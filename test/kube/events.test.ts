/**
 * src/kube/events.ts, the shared recorder, against a real HTTP server standing in for kube-apiserver's Events API:
 * recording returns at once and sends nothing in the caller's tick; a slow API builds a backlog that is bounded
 * (past it Events are dropped and counted in `sandbox_events_total{result="dropped"}`), and an API that fails is
 * counted, never thrown to the caller.
 */
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import { Registry } from 'prom-client';
import { EventRecorder, KubeClient } from '../../src/kube/index.js';

const quiet = { debug: () => {}, warn: () => {} };
const regarding = { apiVersion: 'agents.x-k8s.io/v1beta1', kind: 'Sandbox', namespace: 'ns', name: 'sb', uid: 'u1' };
const ev = { type: 'Normal' as const, reason: 'SandboxPaused', action: 'Pause', note: 'Paused by alice' };

describe('EventRecorder (shared by the operator, sandbox-apiserver and the claim gateway)', () => {
  let held: Array<{ body: string; res: ServerResponse }> = [];
  let answer: 'hold' | 201 | 500 = 'hold';
  let server: ReturnType<typeof createServer>;
  let client: KubeClient;
  before(async () => {
    server = createServer((req: IncomingMessage, res: ServerResponse) => {
      let body = '';
      req.on('data', (d: Buffer) => (body += d.toString()));
      req.on('end', () => {
        if (answer === 'hold') held.push({ body, res });
        else res.writeHead(answer, { 'content-type': 'application/json' }).end(answer === 201 ? body : '{}');
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    const kc = new KubeConfig();
    kc.loadFromOptions({
      clusters: [
        { name: 'c', server: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, skipTLSVerify: true },
      ],
      users: [{ name: 'u' }],
      contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
      currentContext: 'x',
    });
    client = await KubeClient.fromKubeconfig(kc, { qps: -1 });
  });
  after(() => {
    client.close();
    server.closeAllConnections();
    server.close();
  });

  it('sends after the caller’s tick, bounds a backlog by dropping and counting, and drains when the API answers', async () => {
    const registry = new Registry();
    const r = new EventRecorder(client, quiet, { controller: 'test', registry, maxInFlight: 2, maxQueued: 3 });
    for (let i = 0; i < 10; i++) r.recordFor(regarding, ev);
    // Ten records in one tick: three wait, seven are dropped; none has been sent yet.
    assert.deepEqual(r.stats, { recorded: 0, failed: 0, dropped: 7 });
    assert.equal(held.length, 0, 'nothing is sent in the caller’s tick');
    for (const until = Date.now() + 5000; held.length < 2 && Date.now() < until;)
      await new Promise((s) => setTimeout(s, 10));
    assert.equal(held.length, 2, 'at most maxInFlight creates at once');
    const sent = JSON.parse(held[0]!.body);
    assert.equal(sent.apiVersion, 'events.k8s.io/v1');
    assert.deepEqual(sent.regarding, regarding);
    assert.equal(sent.reportingController, 'test');
    assert.match(sent.metadata.name, /^sb\.[0-9a-f]+$/);
    // Two in flight, one waiting: room for two more, then drops again.
    for (let i = 0; i < 4; i++) r.recordFor(regarding, ev);
    assert.equal(r.stats.dropped, 9);
    answer = 201;
    for (const h of held.splice(0)) h.res.writeHead(201, { 'content-type': 'application/json' }).end(h.body);
    await r.idle();
    assert.deepEqual(r.stats, { recorded: 5, failed: 0, dropped: 9 });
    const metric = (await registry.getSingleMetric('sandbox_events_total')!.get()).values;
    const count = (result: string) => metric.find((v) => v.labels.result === result)?.value;
    assert.equal(count('dropped'), 9);
    assert.equal(count('recorded'), 5);
  });

  it('an Events API that fails is counted, never thrown', async () => {
    answer = 500;
    const r = new EventRecorder(client, quiet, { controller: 'test' });
    assert.doesNotThrow(() => r.recordFor(regarding, ev));
    await r.idle();
    assert.deepEqual(r.stats, { recorded: 0, failed: 1, dropped: 0 });
    held = [];
  });
});
