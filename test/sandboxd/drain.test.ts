/**
 * Draining a node (docs/sandboxd.md "Draining") on real microVMs: claimed sandboxes with a file each, one of them
 * paused in memory and one claim still being cloned when the drain starts; the drain hibernates every one (the claim
 * in flight completes first), releases the warm VMs, refuses claims on every listener and wakes with
 * `sandboxd.draining` while spending no VM; the undrain takes claims again, wakes the sandboxes that were running,
 * and every sandbox resumes with its file. Then the same through the daemon binary (build.ts's wiring) across a
 * kill -9: it restarts drained, and the undrain wakes what the drain put to sleep.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { ClaimGateway } from '../../src/sandboxd/claim-gateway.js';
import { API_REASON, NodeDrain } from '../../src/sandboxd/drain.js';
import { defaultRunRoot, NodeEngine } from '../../src/sandboxd/engine.js';
import { SandboxdApi } from '../../src/sandboxd/http-api.js';
import { silentLogger } from '../../src/log/logger.js';
import { isSpare } from '../../src/vmm/spares.js';
import { eventually } from '../support/eventually.js';
import { call as callApi, SandboxdProcess } from '../support/sandboxd-daemon.js';

const ROOT = 'root-token-for-drain';
const TENANT = 'tenant-token-for-drain';
const AUTH = { rootToken: ROOT, tenants: new Map([[TENANT, 'acme']]), allowAnonymous: false };
const KEY = { template: 'sandbox/minimal', net: 'none', size: 'small' } as const;

function call(base: string, method: string, path: string, body?: unknown, token: string | null = ROOT) {
  return callApi(base, method, path, body, token);
}

interface Row {
  id: string;
  phase: string;
  hibernated: boolean;
}

describe('draining a sandboxd node (real microVMs)', () => {
  let dir: string;
  let engine: NodeEngine;
  let drain: NodeDrain;
  let api: SandboxdApi;
  let gateway: ClaimGateway;
  let base: string;
  let gwBase: string;
  /** Sandbox id -> the text written in it before the drain. */
  const marks = new Map<string, string>();
  let pausedId = '';
  let checkpointId = '';

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sbxd-drain-'));
    engine = new NodeEngine({ dataDir: dir, nodeName: 'drain-node', advertiseAddr: '127.0.0.1:7777', maxClaims: 6 });
    await engine.start();
    drain = new NodeDrain({ engine, dataDir: dir, logger: silentLogger });
    api = new SandboxdApi({ engine, auth: AUTH, drain });
    base = `http://127.0.0.1:${(await api.listen('127.0.0.1', 0)).port}`;
    gateway = new ClaimGateway({ api, auth: AUTH });
    gwBase = `http://127.0.0.1:${(await gateway.listen('127.0.0.1', 0)).port}`;
  });

  after(async () => {
    await gateway?.close();
    await api?.close();
    await drain?.close();
    await engine?.close({ destroyVms: true });
    await rm(dir, { recursive: true, force: true });
  });

  const rows = async (): Promise<Row[]> => (await call(base, 'GET', '/v1/sandboxes')).json.sandboxes as Row[];

  async function claimWithMark(ref: string): Promise<string> {
    const c = await call(base, 'POST', '/v1/claim', { ...KEY, claim_ref: ref, ttl_seconds: 900 });
    assert.equal(c.status, 200, JSON.stringify(c.json));
    const id = c.json.id as string;
    await mark(id, ref);
    return id;
  }

  async function mark(id: string, text: string): Promise<void> {
    const w = await call(base, 'POST', `/v1/sandboxes/${id}/exec`, {
      argv: ['sh', '-c', `echo ${text} > /tmp/drain-mark`],
    });
    assert.equal(w.status, 200, JSON.stringify(w.json));
    marks.set(id, text);
  }

  it('claims three sandboxes with a file each (one paused in memory) beside a warm pool', async () => {
    assert.equal((await call(base, 'PUT', '/v1/pools', { pools: [{ ...KEY, warm: 1 }] })).status, 200);
    await eventually(async () => (await call(base, 'GET', '/v1/info')).json, {
      timeoutMs: 180_000,
      what: 'one warm VM',
      until: (j) => (j.pools as Array<{ warm: number }>)[0]?.warm === 1,
    });
    const one = await claimWithMark('drain/one');
    const ck = await call(base, 'POST', `/v1/sandboxes/${one}/checkpoint`, {});
    assert.equal(ck.status, 200, JSON.stringify(ck.json));
    checkpointId = (ck.json.checkpoint as { id: string }).id;
    pausedId = await claimWithMark('drain/two');
    const p = await call(base, 'POST', `/v1/sandboxes/${pausedId}/pause`);
    assert.equal(p.status, 200, JSON.stringify(p.json));
    assert.equal((p.json.sandbox as Row).phase, 'Paused');
  });

  it('drains: a claim in flight completes and is hibernated, every sandbox is hibernated, warm VMs released', async () => {
    // Only the root token drains a node.
    assert.equal((await call(base, 'POST', '/v1/drain', undefined, TENANT)).status, 403);
    assert.equal((await call(base, 'POST', '/v1/drain', { force: true })).status, 400);
    // A claim of a key no pool keeps is a clone; the drain starts in the same tick, while the clone is in flight (a
    // clone from a spare VMM takes tens of ms, too short to aim an HTTP request at).
    const inFlight = engine.claim({ key: { ...KEY, size: 'medium' }, claimRef: 'drain/three', ttlSeconds: 900 });
    assert.equal(engine.claimsInFlight, 1, 'the clone is in flight');
    drain.start(API_REASON);
    // The route, on a node draining already: idempotent, one reason.
    const started = await call(base, 'POST', '/v1/drain');
    assert.equal(started.status, 200, JSON.stringify(started.json));
    assert.equal(started.json.draining, true);
    assert.deepEqual((started.json.drain as { reasons: string[] }).reasons, ['api']);
    const thirdId = (await inFlight).id; // admitted before the gate: it completes

    const info = await eventually(async () => (await call(base, 'GET', '/v1/info')).json, {
      timeoutMs: 180_000,
      what: 'the drain done with all three sandboxes hibernated',
      until: (j) => (j.drain as { done?: boolean } | undefined)?.done === true,
    });
    assert.equal(info.draining, true);
    assert.deepEqual(
      { ...(info.drain as Record<string, unknown>), since: undefined },
      {
        since: undefined,
        reasons: ['api'],
        hibernated: 3,
        remaining: 0,
        failed: [],
        portable: 0,
        copied: 0,
        done: true,
      },
    );
    assert.equal(info.hibernated, 3);
    const all = await rows();
    assert.equal(all.length, 3);
    for (const r of all) assert.equal(r.phase, 'Hibernated', `${r.id} is ${r.phase}`);
    assert.ok(all.some((r) => r.id === thirdId));
    const pools = info.pools as Array<{ warm: number; target: number }>;
    assert.equal(pools[0]?.warm, 0, 'a draining node keeps no warm VM');
    assert.equal(pools[0]?.target, 1, 'the target is kept for the undrain');
    // Nothing runs any more: every VM of the node is hibernated (the warm one was destroyed). Spare VMMs (a paused
    // QEMU per template with its state loaded, never a tenant's, docs/sandboxd.md "Spare VMMs") are not sandboxes.
    await eventually(async () => engine.driver.list().filter((v) => v.alive && !isSpare(v)).length, {
      timeoutMs: 30_000,
      what: 'no VM running on the drained node',
      until: (n) => n === 0,
    });
  });

  it('refuses claims (API, tenant, claim gateway, checkpoint claim) and wakes with sandboxd.draining, spending no VM', async () => {
    const vmsBefore = engine.driver.list().length;
    for (const [where, token] of [
      [base, ROOT],
      [base, TENANT],
      [gwBase, ROOT],
    ] as const) {
      const r = await call(where, 'POST', '/v1/claim', { ...KEY, ttl_seconds: 60 }, token);
      assert.equal(r.status, 429, `${where}: ${JSON.stringify(r.json)}`);
      assert.match(String(r.json.error), /node drain-node is draining since .*claim on another node/s);
    }
    const wake = await call(base, 'POST', `/v1/sandboxes/${pausedId}/resume`);
    assert.equal(wake.status, 429, JSON.stringify(wake.json));
    assert.match(String(wake.json.error), /stays hibernated on it.*resume it once the node is undrained/s);
    const fromCk = await call(base, 'POST', `/v1/checkpoints/${checkpointId}/claim`, { no_redirect: true });
    assert.equal(fromCk.status, 429, JSON.stringify(fromCk.json));
    assert.match(String(fromCk.json.error), /draining/);
    assert.equal((await rows()).length, 3, 'no claim was made');
    assert.equal(engine.driver.list().length, vmsBefore, 'no VM was made');
  });

  it('undrains: claims work again, the sandboxes that ran are woken, each resumes with its file', async () => {
    const ended = await call(base, 'DELETE', '/v1/drain');
    assert.equal(ended.status, 200, JSON.stringify(ended.json));
    assert.equal(ended.json.draining, false);
    const fresh = await call(base, 'POST', '/v1/claim', { ...KEY, claim_ref: 'drain/after', ttl_seconds: 60 });
    assert.equal(fresh.status, 200, JSON.stringify(fresh.json));
    assert.equal((await call(base, 'POST', `/v1/sandboxes/${fresh.json.id as string}/release`)).status, 204);

    await eventually(rows, {
      timeoutMs: 120_000,
      what: 'the sandboxes the drain hibernated from running woken; the paused one still hibernated',
      until: (rs) => rs.every((r) => (r.id === pausedId ? r.phase === 'Hibernated' : r.phase === 'Running')),
    });
    const info = (await call(base, 'GET', '/v1/info')).json;
    assert.equal(info.draining, undefined);
    // The one the drain found paused waits for its owner, as after any pause.
    assert.equal((await call(base, 'POST', `/v1/sandboxes/${pausedId}/resume`)).status, 200);
    for (const [id, text] of marks) {
      const r = await call(base, 'POST', `/v1/sandboxes/${id}/exec`, { argv: ['cat', '/tmp/drain-mark'] });
      assert.equal(r.status, 200, JSON.stringify(r.json));
      assert.equal(String(r.json.stdout).trim(), text, `sandbox ${id} kept its file`);
    }
    await eventually(async () => (await call(base, 'GET', '/v1/info')).json, {
      timeoutMs: 180_000,
      what: 'the warm pool refilled after the undrain',
      until: (j) => (j.pools as Array<{ warm: number }>)[0]?.warm === 1,
    });
  });
});

describe('a drain survives a restart of the daemon (bin/sandboxd.mjs)', () => {
  it('restarts drained, refuses claims, and the undrain then wakes the sandbox with its file', async () => {
    const daemon = await SandboxdProcess.create('drain-restart', ROOT, { acme: TENANT });
    try {
      // One copy per checkpoint: with more, each hibernation also becomes a checkpoint made in the background
      // (docs/placement.md "Resume anywhere"), whose QEMU the kill -9 below would cut off mid-way.
      await daemon.start(['--pools', 'sandbox/minimal=1', '--checkpoint-replicas', '1']);
      const claim = await call(daemon.base, 'POST', '/v1/claim', { ...KEY, claim_ref: 'ns/kept', ttl_seconds: 600 });
      assert.equal(claim.status, 200, JSON.stringify(claim.json));
      const id = claim.json.id as string;
      const w = await call(daemon.base, 'POST', `/v1/sandboxes/${id}/exec`, {
        argv: ['sh', '-c', 'echo kept > /tmp/drain-mark'],
      });
      assert.equal(w.status, 200, JSON.stringify(w.json));
      assert.equal((await call(daemon.base, 'POST', '/v1/drain')).status, 200);
      await eventually(async () => (await call(daemon.base, 'GET', '/v1/info')).json, {
        timeoutMs: 120_000,
        what: 'the drain done',
        until: (j) => (j.drain as { done?: boolean } | undefined)?.done === true,
      });

      await daemon.kill();
      await daemon.start(['--pools', 'sandbox/minimal=1', '--checkpoint-replicas', '1', '--destroy-on-exit']);
      const info = (await call(daemon.base, 'GET', '/v1/info')).json;
      assert.equal(info.draining, true, `${JSON.stringify(info)}\n${daemon.logs.join('')}`);
      assert.equal((info.pools as Array<{ warm: number }>)[0]?.warm ?? 0, 0, 'no refill while drained');
      const refused = await call(daemon.base, 'POST', '/v1/claim', { ...KEY, ttl_seconds: 60 });
      assert.equal(refused.status, 429, JSON.stringify(refused.json));
      const [row] = (await call(daemon.base, 'GET', '/v1/sandboxes')).json.sandboxes as Row[];
      assert.equal(row?.phase, 'Hibernated');

      assert.equal((await call(daemon.base, 'DELETE', '/v1/drain')).status, 200);
      await eventually(async () => (await call(daemon.base, 'GET', '/v1/sandboxes')).json.sandboxes as Row[], {
        timeoutMs: 60_000,
        what: 'the sandbox woken by the undrain after the restart',
        until: (rs) => rs[0]?.phase === 'Running',
      });
      const again = await call(daemon.base, 'POST', `/v1/sandboxes/${id}/exec`, { argv: ['cat', '/tmp/drain-mark'] });
      assert.equal(again.status, 200, JSON.stringify(again.json));
      assert.equal(again.json.stdout, 'kept\n');
    } finally {
      await daemon.stop();
    }
    assert.deepEqual(await readdir(defaultRunRoot(daemon.dataDir)).catch(() => []), [], 'no VM run dir left');
    await daemon.remove();
  });
});
