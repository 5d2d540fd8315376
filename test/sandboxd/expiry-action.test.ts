/**
 * The lease-end action (`on_expiry: hibernate`, the e2b API's autoPause) over the simulated engine
 * (src/vmm/sim-driver.ts): a VM that cannot do it is released, never renewed (an egress-lane claim once renewed
 * itself for 24 h at every lease's end, forever), and the failure is logged and counted
 * (`sandboxd_expiry_action_failures_total`); a claim that asks for what the VM cannot do is refused with a 400
 * naming `on_expiry`, before any VM is spent.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { NodeEngine } from '../../src/sandboxd/engine.js';
import type { SandboxdApi } from '../../src/sandboxd/http-api.js';
import { eventually } from '../support/eventually.js';
import { call } from '../support/sandboxd-daemon.js';
import { listenSandboxdApi, simNodeEngine } from '../support/sim-node.js';

const ROOT = 'root-token-for-expiry-tests';
const KEY = { template: 'sandbox/minimal', net: 'none', size: 'small' } as const;
const EGRESS = { ...KEY, net: 'egress' } as const;

describe('lease-end action (sim engine)', () => {
  let dir: string;
  let engine: NodeEngine;
  let api: SandboxdApi;
  let base: string;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sbx-expiry-'));
    ({ engine } = simNodeEngine(dir));
    await engine.start();
    ({ api, base } = await listenSandboxdApi({
      engine,
      auth: { rootToken: ROOT, tenants: new Map(), allowAnonymous: false },
    }));
  });

  after(async () => {
    await api?.close();
    await engine?.close({ destroyVms: true });
    await rm(dir, { recursive: true, force: true });
  });

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

  it('releases an egress-lane claim that a previous daemon let ask for hibernate (no 24 h renewal)', async () => {
    // Claims like this one were accepted before the claim paths refused them; a state file may still hold one.
    const rec = await engine.claim({ key: EGRESS, ttlSeconds: 1, claimRef: 'ns/egress' });
    engine.get(rec.id)!.onExpiry = 'hibernate';
    await eventually(() => engine.get(rec.id), {
      until: (r) => r === undefined,
      timeoutMs: 6000,
      intervalMs: 50,
      what: `the egress sandbox released at its lease's end (deadline now ${engine.get(rec.id)?.deadline})`,
    });
    assert.equal(await failures(), 2);
  });

  it('still hibernates a VM that can, and keeps it for the longest lease', async () => {
    const rec = await engine.claim({ key: KEY, ttlSeconds: 1, claimRef: 'ns/ok', onExpiry: 'hibernate' });
    await eventually(() => engine.get(rec.id)?.hibernated, { until: (h) => h === true, timeoutMs: 6000 });
    const left = Date.parse(engine.get(rec.id)!.deadline) - Date.now();
    assert.ok(left > 86_000_000, `kept ~24 h after hibernating (${left} ms left)`);
    await engine.release(rec.id);
  });

  it('refuses on_expiry=hibernate on the egress lane with a 400 naming on_expiry, spending no VM', async () => {
    const vms = engine.driver.list().length;
    const r = await call(
      base,
      'POST',
      '/v1/claim',
      { ...EGRESS, on_expiry: 'hibernate', ttl_seconds: 60, claim_ref: 'ns/refused' },
      ROOT,
    );
    assert.equal(r.status, 400, JSON.stringify(r.json));
    assert.match(String(r.json.error), /^on_expiry: hibernate is not supported on the egress lane/);
    assert.equal(engine.byRef('ns/refused'), undefined);
    assert.equal(engine.driver.list().length, vms, 'no VM made');
    await assert.rejects(engine.claim({ key: EGRESS, onExpiry: 'hibernate' }), /on_expiry: hibernate/);
    // release (the default) on the egress lane, and hibernate without egress, are fine
    const ok = await call(base, 'POST', '/v1/claim', { ...EGRESS, on_expiry: 'release', ttl_seconds: 60 }, ROOT);
    assert.equal(ok.status, 200, JSON.stringify(ok.json));
    await engine.release(ok.json.id as string);
  });
});
