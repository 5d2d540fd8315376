/**
 * The idle watcher's rules (src/sandboxd/idle.ts) over a stand-in engine, with the VM's CPU and packet counters
 * given by the test: what counts as use (CPU above the threshold, packets above IDLE_PACKETS, an open session),
 * when a quiet sandbox is suspended, and how requests share one wake. Real VMs: test/sandboxd/idle-suspend.test.ts.
 */
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { describe, it } from 'node:test';
import type { SandboxRecord } from '../../src/sandboxd/claims.js';
import { IDLE_PACKETS, IdleSuspender, netnsPackets, type IdleEngine } from '../../src/sandboxd/idle.js';
import type { MicrovmHandle } from '../../src/vmm/index.js';

interface Fake {
  engine: IdleEngine;
  rec: SandboxRecord;
  calls: string[];
  cpu: { ms: number };
  packets: { n: number };
  idle: IdleSuspender;
  wakeGate?: Promise<void>;
}

function setup(seconds = 4): Fake {
  const rec = { id: 'sb_1', vmId: 'vm1', hibernated: false, idleHibernateSeconds: seconds } as SandboxRecord;
  const calls: string[] = [];
  const events = new EventEmitter();
  const fake = { rec, calls, cpu: { ms: 0 }, packets: { n: 0 } } as Fake;
  fake.engine = {
    list: () => [rec],
    get: (id) => (id === rec.id ? rec : undefined),
    vmOf: () => ({ id: 'vm1' }) as MicrovmHandle,
    hibernate: async (_id, reason) => {
      calls.push(`hibernate:${reason ?? 'caller'}`);
      rec.hibernated = true;
      if (reason === 'idle') rec.idleSuspended = true;
    },
    wake: async () => {
      calls.push('wake');
      await fake.wakeGate;
      rec.hibernated = false;
      delete rec.idleSuspended;
    },
    on: (e, l) => events.on(e, l),
  };
  fake.idle = new IdleSuspender(fake.engine, {
    cpuPercent: 10,
    cpuMs: () => fake.cpu.ms,
    packets: () => fake.packets.n,
  });
  return fake;
}

describe('idle watcher', () => {
  it('suspends a quiet sandbox once its policy has passed, not before', async () => {
    const f = setup(4);
    const t = Date.now();
    for (const dt of [0, 2000, 3900]) await f.idle.sweep(t + dt);
    assert.deepEqual(f.calls, [], 'idle for 3.9 s of 4: still running');
    await f.idle.sweep(t + 4000);
    assert.deepEqual(f.calls, ['hibernate:idle']);
    assert.equal(f.rec.idleSuspended, true);
  });

  it('a guest using CPU above the threshold is in use', async () => {
    const f = setup(4);
    const t = Date.now();
    for (let dt = 0; dt <= 20_000; dt += 1000) {
      f.cpu.ms += 300; // 30 % of a core
      await f.idle.sweep(t + dt);
    }
    assert.deepEqual(f.calls, [], 'never suspended while computing');
    for (let dt = 21_000; dt <= 30_000; dt += 1000) {
      f.cpu.ms += 20; // 2 %: an idle guest's ticks
      await f.idle.sweep(t + dt);
    }
    assert.deepEqual(f.calls, ['hibernate:idle'], 'suspended once quiet for its policy');
  });

  it('traffic on its NIC is use; a quiet guest’s few packets are not', async () => {
    const f = setup(4);
    const t = Date.now();
    for (let dt = 0; dt <= 12_000; dt += 1000) {
      f.packets.n += IDLE_PACKETS + 1; // per window of 2 s: well above
      await f.idle.sweep(t + dt);
    }
    assert.deepEqual(f.calls, []);
    for (let dt = 13_000; dt <= 24_000; dt += 1000) {
      if (dt % 2000 === 0) f.packets.n += 2;
      await f.idle.sweep(t + dt);
    }
    assert.deepEqual(f.calls, ['hibernate:idle']);
  });

  it('an open session keeps it awake however quiet', async () => {
    const f = setup(1);
    const done = f.idle.hold(f.rec.id);
    const t = Date.now();
    for (let dt = 0; dt <= 10_000; dt += 1000) await f.idle.sweep(t + dt);
    assert.deepEqual(f.calls, []);
    done();
    done(); // idempotent: a second call does not release another session's hold
    for (let dt = 11_000; dt <= 16_000; dt += 1000) await f.idle.sweep(t + dt);
    assert.deepEqual(f.calls, ['hibernate:idle']);
  });

  it('concurrent requests share one wake; a caller-hibernated sandbox is not woken', async () => {
    const f = setup(1);
    f.rec.hibernated = true;
    f.rec.idleSuspended = true;
    let open!: () => void;
    f.wakeGate = new Promise((r) => (open = r));
    const waits = [f.idle.ensureAwake('sb_1'), f.idle.ensureAwake('sb_1'), f.idle.ensureAwake('sb_1')];
    await new Promise((r) => setImmediate(r));
    open();
    assert.deepEqual(await Promise.all(waits), [true, true, true]);
    assert.deepEqual(f.calls, ['wake'], 'one wake for three requests');
    assert.equal(f.idle.counters.woken, 1);
    f.rec.hibernated = true; // hibernated by a caller: no idleSuspended
    assert.equal(await f.idle.ensureAwake('sb_1'), false);
    assert.deepEqual(f.calls, ['wake']);
  });

  it('a failed wake reaches every waiting request and is counted', async () => {
    const f = setup(1);
    f.rec.hibernated = true;
    f.rec.idleSuspended = true;
    f.engine.wake = async () => {
      throw new Error('node at capacity');
    };
    const results = await Promise.allSettled([f.idle.ensureAwake('sb_1'), f.idle.ensureAwake('sb_1')]);
    assert.deepEqual(
      results.map((r) => r.status),
      ['rejected', 'rejected'],
    );
    assert.equal(f.idle.counters.wakeFailures, 1);
  });

  it('reads packet counters of a network namespace (this process’s own, here)', () => {
    const n = netnsPackets(process.pid);
    assert.equal(typeof n, 'number');
    assert.ok(n! >= 0);
    assert.equal(netnsPackets(2 ** 22 + 7), undefined, 'a process that does not exist');
  });
});
