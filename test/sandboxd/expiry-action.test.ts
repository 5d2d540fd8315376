/**
 * The lease-end action (`on_expiry: hibernate`, the e2b API's autoPause) over the simulated engine
 * (src/vmm/sim-driver.ts): a VM whose hibernate fails is released, never renewed (a claim once renewed itself for
 * 24 h at every lease's end, forever), and the failure is logged and counted (`sandboxd_expiry_action_failures_total`).
 * The egress lane hibernates like any other (test/sandboxd/egress-verbs.test.ts).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { NodeEngine } from '../../src/sandboxd/engine.js';
import type { SandboxdApi } from '../../src/sandboxd/http-api.js';
import { eventually } from '../support/eventually.js';
import { startSimNode, type SimNode } from '../support/sim-node.js';

const ROOT = 'root-token-for-expiry-tests';
const KEY = { template: 'sandbox/minimal', net: 'none', size: 'small' } as const;

describe('lease-end action (sim engine)', () => {
  let node: SimNode;
  let engine: NodeEngine;
  let api: SandboxdApi;

  before(async () => {
    node = await startSimNode('sbx-expiry-', ROOT);
    ({ engine, api } = node);
  });

  after(() => node?.close());

  const failures = async () => {
    const text = await api.registry.metrics();
    const m = /^sandboxd_expiry_action_failures_total\{action="hibernate"\} (\d+)$/m.exec(text);
    return m ? Number(m[1]) : 0;
  };

  it('releases a sandbox whose hibernate at the end of its lease fails, instead of renewing it', async () => {
    const rec = await engine.claim({ key: KEY, ttlSeconds: 1, claimRef: 'ns/fails', onExpiry: 'hibernate' });
    const vm = engine.vm(rec.id);
    let tries = 0;
    vm.hibernate = async () => {
      tries++;
      throw new Error('snapshot write failed: disk full');
    };
    const releasesBefore = engine.counters.releases;
    await eventually(() => engine.get(rec.id), {
      until: (r) => r === undefined,
      timeoutMs: 6000,
      intervalMs: 50,
      what: `the sandbox released after its hibernate failed (deadline now ${engine.get(rec.id)?.deadline})`,
    });
    assert.equal(tries, 1, 'one try, then the release');
    assert.equal(engine.counters.releases, releasesBefore + 1);
    assert.equal(engine.counters.expiryFailures, 1);
    assert.equal(await failures(), 1, 'counted in sandboxd_expiry_action_failures_total');
    assert.equal(engine.byRef('ns/fails'), undefined);
  });

  it('a pause-filesystem that cannot be had at the lease end (no guest to save) is a release, counted by action', async () => {
    const rec = await engine.claim({ key: KEY, ttlSeconds: 1, claimRef: 'ns/files', onExpiry: 'pause-filesystem' });
    await eventually(() => engine.get(rec.id), { until: (r) => r === undefined, timeoutMs: 6000, intervalMs: 50 });
    const text = await api.registry.metrics();
    assert.match(text, /^sandboxd_expiry_action_failures_total\{action="pause-filesystem"\} 1$/m);
  });

  it('still hibernates a VM that can, and keeps it for the longest lease', async () => {
    const rec = await engine.claim({ key: KEY, ttlSeconds: 1, claimRef: 'ns/ok', onExpiry: 'hibernate' });
    await eventually(() => engine.get(rec.id)?.hibernated, { until: (h) => h === true, timeoutMs: 6000 });
    const left = Date.parse(engine.get(rec.id)!.deadline) - Date.now();
    assert.ok(left > 86_000_000, `kept ~24 h after hibernating (${left} ms left)`);
    await engine.release(rec.id);
  });
});
