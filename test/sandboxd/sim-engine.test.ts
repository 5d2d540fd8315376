/**
 * The simulated engine (`sandboxd --engine=sim`, src/vmm/sim-driver.ts): the real NodeEngine (pools, claims,
 * leases, fork, checkpoints, state file) over a driver whose VMs are records with a clone delay. What must hold for
 * the fleet benchmark to mean anything: the pool fills at (refill concurrency / clone delay), claims and releases go
 * through the real tables, the node names the simulation wherever it reports itself, and nothing pretends to run a
 * command.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { buildInventory, INVENTORY_MAX_ENTRIES } from '../../src/sandboxd/inventory.js';
import { freePort } from '../../src/net/free-port.js';
import { PeerClient } from '../../src/sandboxd/placement/peer-client.js';
import { Replicator } from '../../src/sandboxd/placement/replicate.js';
import { eventually } from '../support/eventually.js';
import { simNodeEngine } from '../support/sim-node.js';

const KEY = { template: 'sandbox/minimal', net: 'none', size: 'small' } as const;

function simEngine(
  dir: string,
  opts: { cloneMs: number; refillConcurrency?: number; maxClaims?: number; maxCheckpoints?: number },
) {
  return simNodeEngine(dir, {
    cloneMs: opts.cloneMs,
    refillConcurrency: opts.refillConcurrency ?? 2,
    maxClaims: opts.maxClaims ?? 5000,
    ...(opts.maxCheckpoints !== undefined ? { maxCheckpoints: opts.maxCheckpoints } : {}),
  });
}

describe('simulated engine', () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sbx-sim-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('fills a pool at refill concurrency / clone delay, and claims and releases through the real tables', async () => {
    const { engine, driver } = simEngine(join(dir, 'fill'), { cloneMs: 50, refillConcurrency: 4 });
    await engine.start();
    try {
      await engine.prepare(KEY);
      const t0 = performance.now();
      engine.setTargets([{ key: KEY, warm: 40 }]);
      await eventually(() => engine.warmCount(KEY), { until: (n) => n === 40, timeoutMs: 10_000, intervalMs: 5 });
      const ms = performance.now() - t0;
      // 40 clones, 4 at a time, 50 ms each: 10 rounds = 500 ms (timers are late, never early).
      assert.ok(ms >= 500 && ms < 1500, `filled in ${ms.toFixed(0)} ms`);
      assert.equal(driver.size, 40);

      const rec = await engine.claim({
        key: KEY,
        claimRef: 'ns/a',
        object: { metadata: { name: 'a', namespace: 'ns' } },
      });
      assert.equal(rec.source, 'warm');
      assert.equal(engine.byRef('ns/a')?.id, rec.id);
      // Taken from the pool, not made: the claim answers after the journal's fdatasync, during which the refill
      // (25 ms delay, 50 ms clone) may already have replaced it, so the pool's count at this instant is 39 or 40.
      assert.equal(engine.counters.warmHits, 1);
      await eventually(() => engine.warmCount(KEY), { until: (n) => n === 40, timeoutMs: 5000, intervalMs: 5 });
      assert.equal(driver.size, 41, 'the refill replaced the claimed VM');

      await engine.pause(rec.id);
      assert.equal(engine.get(rec.id)?.paused, true);
      await assert.rejects(engine.fork(rec.id, 1), /resume it first/);
      await engine.resume(rec.id);
      await engine.hibernate(rec.id);
      assert.equal(engine.vm(rec.id).state, 'hibernated');
      await engine.wake(rec.id);
      assert.equal(engine.vm(rec.id).state, 'running');

      const children = await engine.fork(rec.id, 3);
      assert.equal(children.length, 3);
      assert.ok(children.every((c) => c.source === 'fork'));
      assert.equal(engine.claimedCount, 4);

      await assert.rejects(engine.vm(rec.id).run(['true']), /simulated \(sandboxd --engine=sim\)/);

      await engine.release(rec.id);
      assert.equal(engine.get(rec.id), undefined);
      assert.equal(engine.claimedCount, 3);
      assert.equal(driver.get(rec.vmId), undefined, 'the released VM is gone');
    } finally {
      await engine.close({ destroyVms: true });
    }
  });

  it('reaps each expired lease once, when a teardown outlasts the reaper tick', async () => {
    const { engine } = simEngine(join(dir, 'reap'), { cloneMs: 1 });
    await engine.start();
    try {
      const recs = [];
      for (let i = 0; i < 3; i++) recs.push(await engine.claim({ key: KEY, ttlSeconds: 1, claimRef: `ns/r${i}` }));
      // Each teardown takes 1.5 s, longer than the 1 s tick: one sweep spans several ticks.
      for (const r of recs) {
        const vm = engine.vm(r.id);
        const destroy = vm.destroy.bind(vm);
        vm.destroy = async () => {
          await sleep(1500);
          await destroy();
        };
      }
      await eventually(() => engine.claimedCount, { until: (n) => n === 0, timeoutMs: 15_000, intervalMs: 50 });
      await sleep(2500); // the sweep still tearing down the last VM, and the ticks after it
      assert.equal(engine.counters.reaps, 3, 'each lease reaped once');
      assert.equal(engine.counters.releases, 3);
    } finally {
      await engine.close({ destroyVms: true });
    }
  });

  it('keeps checkpoints (as records on disk) across a restart, and serves claims from them', async () => {
    const data = join(dir, 'ck');
    const first = simEngine(data, { cloneMs: 5 });
    await first.engine.start();
    const rec = await first.engine.claim({ key: KEY });
    assert.equal(rec.source, 'provisioned', 'no pool: a clone on the miss');
    const ck = await first.engine.checkpoint(rec.id, 'snap');
    await first.engine.close({ destroyVms: false });

    const second = simEngine(data, { cloneMs: 5 });
    await second.engine.start();
    try {
      // Simulated VMs do not outlive their daemon: the claim is gone, the checkpoint is not.
      assert.equal(second.engine.claimedCount, 0);
      assert.deepEqual(
        second.engine.listCheckpoints().map((c) => c.id),
        [ck.id],
      );
      const fromCk = await second.engine.claimCheckpoint(ck.id);
      assert.equal(fromCk.fromCheckpoint, ck.id);
      assert.equal(second.engine.deleteCheckpoint(ck.id), true);
    } finally {
      await second.engine.close({ destroyVms: true });
    }
  });

  it('keeps at most --max-checkpoints, counting the ones being taken; a delete makes room', async () => {
    const { engine } = simEngine(join(dir, 'ck-cap'), { cloneMs: 5, maxCheckpoints: 3 });
    await engine.start();
    try {
      const rec = await engine.claim({ key: KEY });
      // Five at once: three are taken, two refused at once, however the checkpoints interleave.
      const results = await Promise.allSettled(Array.from({ length: 5 }, () => engine.checkpoint(rec.id)));
      const refused = results.filter((r) => r.status === 'rejected').map((r) => (r as PromiseRejectedResult).reason);
      assert.equal(results.length - refused.length, 3);
      assert.deepEqual(
        refused.map((e: { code?: string }) => e.code),
        ['sandboxd.at-capacity', 'sandboxd.at-capacity'],
      );
      assert.match(String(refused[0]), /keeps at most 3 checkpoints/);
      assert.equal(engine.listCheckpoints().length, 3);
      assert.equal(engine.deleteCheckpoint(engine.listCheckpoints()[0]!.id), true);
      await engine.checkpoint(rec.id);
      assert.equal(engine.listCheckpoints().length, 3);
    } finally {
      await engine.close({ destroyVms: true });
    }
  });

  it('NodeInventory names the simulation and caps its entries', async () => {
    const { engine } = simEngine(join(dir, 'inv'), { cloneMs: 0, maxClaims: INVENTORY_MAX_ENTRIES + 10 });
    await engine.start();
    try {
      for (let i = 0; i < INVENTORY_MAX_ENTRIES + 5; i++)
        await engine.claim({ key: KEY, claimRef: `ns/s${String(i).padStart(5, '0')}` });
      const inv = buildInventory(engine, 'sim-node', '127.0.0.1:7777');
      assert.equal(inv.entries.length, INVENTORY_MAX_ENTRIES);
      assert.equal(inv.entries[0]!.name, 'ns/s00000');
      const ann = inv.metadata.annotations ?? {};
      assert.match(ann['sandbox.cocoonstack.io/simulation'] ?? '', /simulated VMM/);
      assert.match(
        ann['sandbox.cocoonstack.io/inventory-entries'] ?? '',
        new RegExp(`^${INVENTORY_MAX_ENTRIES} of ${INVENTORY_MAX_ENTRIES + 5} `),
      );
    } finally {
      await engine.close({ destroyVms: true });
    }
  });

  it("NodeInventory's checkpoints: how many it holds, and once a count ran, how many were short", async () => {
    const { engine } = simEngine(join(dir, 'inv-ck'), { cloneMs: 0 });
    await engine.start();
    const client = new PeerClient('fleet-token');
    try {
      const rec = await engine.claim({ key: KEY, claimRef: 'ns/ck' });
      await engine.checkpoint(rec.id);
      // Replicas 1: nothing counts, so there is no count to show (absent, not zero).
      assert.deepEqual(buildInventory(engine, 'sim-node', '127.0.0.1:7777').checkpoints, { held: 1, replicas: 1 });
      // Replicas 2 with one peer that does not answer (nothing listens on port 1): the count finds one copy of two.
      const replicator = new Replicator({
        store: engine.checkpointStore,
        client,
        peers: () => ['127.0.0.1:1'],
        self: () => '127.0.0.1:7777',
        replicas: 2,
        intervalMs: 60_000,
        copyTimeoutMs: 1000,
        probeTimeoutMs: 500,
      });
      const summary = () => buildInventory(engine, 'sim-node', '127.0.0.1:7777', replicator).checkpoints;
      assert.deepEqual(summary(), { held: 1, replicas: 2, counted: 0, underReplicated: 0 });
      await replicator.pass();
      assert.deepEqual(summary(), { held: 1, replicas: 2, counted: 1, underReplicated: 1 });
    } finally {
      client.close();
      await engine.close({ destroyVms: true });
    }
  });

  it('sandboxd --engine=sim says so in /v1/info and its metrics, and refuses exec', async () => {
    const port = await freePort();
    const data = join(dir, 'daemon');
    const child = spawn(
      process.execPath,
      [
        join(import.meta.dirname, '../../bin/sandboxd.mjs'),
        '--engine=sim',
        '--sim-clone-ms=10',
        `--listen=127.0.0.1:${port}`,
        `--data-dir=${data}`,
        '--allow-anonymous',
        '--vk-nodes=',
        '--pools=sandbox/minimal=3',
        '--destroy-on-exit',
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let log = '';
    child.stdout.on('data', (d: Buffer) => (log += d.toString()));
    child.stderr.on('data', (d: Buffer) => (log += d.toString()));
    try {
      const base = `http://127.0.0.1:${port}`;
      const info = await eventually(
        async () => (await fetch(`${base}/v1/info`)).json() as Promise<Record<string, unknown>>,
        {
          until: (i) => (i.pools as Array<{ warm: number }> | undefined)?.[0]?.warm === 3,
          timeoutMs: 60_000,
          intervalMs: 100,
          what: 'a simulated pool of 3',
        },
      );
      assert.equal(info.engine, 'sim');
      assert.deepEqual(info.simulation, {
        note: 'simulated VMM (sandboxd --engine=sim): no VM runs behind this sandbox',
        clone_ms: 10,
      });
      const metrics = await (await fetch(`${base}/metrics`)).text();
      assert.match(metrics, /sandboxd_pool_warm\{engine="sim",template="sandbox\/minimal",net="none",size="small"\} 3/);
      const claim = (await (
        await fetch(`${base}/v1/claim`, { method: 'POST', body: JSON.stringify({ template: 'sandbox/minimal' }) })
      ).json()) as { id: string };
      const exec = await fetch(`${base}/v1/sandboxes/${claim.id}/exec`, {
        method: 'POST',
        body: JSON.stringify({ argv: ['true'] }),
      });
      assert.equal(exec.status, 409);
      assert.match(((await exec.json()) as { error: string }).error, /simulated/);
      assert.match(log, /"engine":"sim"/, 'log lines name the simulation');
      assert.match(log, /SIMULATED engine/);
    } finally {
      child.kill('SIGTERM');
      await new Promise((r) => child.once('exit', r));
      await sleep(0);
    }
  });
});
