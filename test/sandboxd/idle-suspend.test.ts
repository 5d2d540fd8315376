/**
 * Idle suspend with transparent resume (src/sandboxd/idle.ts; docs/sandboxd.md "Idle suspend") on real microVMs:
 * a claim with `idle_hibernate_seconds` is hibernated once nothing uses it for that long, and the next exec runs in
 * it with its files; a busy guest and an open session keep it awake; a suspended sandbox holds no running slot, and
 * a wake that finds none says so and loses nothing; a caller's pause of a suspended sandbox stays a pause.
 */
import assert from 'node:assert/strict';
import { existsSync, statSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { NodeEngine } from '../../src/sandboxd/engine.js';
import { SandboxdApi } from '../../src/sandboxd/http-api.js';
import { pidCpuMs } from '../../src/vmm/process.js';
import { eventually } from '../support/eventually.js';
import { call as callApi } from '../support/sandboxd-daemon.js';

const ROOT = 'root-token-for-idle-tests';
const KEY = { template: 'sandbox/minimal', net: 'none', size: 'small' } as const;
const IDLE_SECONDS = 3;

describe('idle suspend and transparent resume (real microVMs)', () => {
  let dir: string;
  let engine: NodeEngine;
  let api: SandboxdApi;
  let base: string;
  const call = (method: string, path: string, body?: unknown, token: string | null = ROOT) =>
    callApi(base, method, path, body, token);
  const exec = (id: string, script: string, timeout = 60) =>
    call('POST', `/v1/sandboxes/${id}/exec`, { argv: ['sh', '-c', script], timeout_seconds: timeout });
  const phase = async (id: string) => ((await call('GET', `/v1/sandboxes/${id}`)).json.phase as string) ?? 'gone';
  const claim = async (ref: string, idle = IDLE_SECONDS) => {
    const r = await call('POST', '/v1/claim', {
      ...KEY,
      claim_ref: ref,
      ttl_seconds: 600,
      idle_hibernate_seconds: idle,
    });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    return r.json.id as string;
  };
  const suspended = (id: string, what: string) =>
    eventually(() => phase(id), { until: (p) => p === 'Suspended', timeoutMs: 90_000, intervalMs: 250, what });

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sbxd-idle-'));
    // One running slot: the capacity case below needs the node full with one running sandbox.
    engine = new NodeEngine({ dataDir: dir, nodeName: 'idle-node', advertiseAddr: '127.0.0.1:7777', maxClaims: 1 });
    await engine.start();
    api = new SandboxdApi({ engine, auth: { rootToken: ROOT, tenants: new Map(), allowAnonymous: false } });
    base = `http://127.0.0.1:${(await api.listen('127.0.0.1', 0)).port}`;
    const put = await call('PUT', '/v1/pools', { pools: [{ ...KEY, warm: 1 }] });
    assert.equal(put.status, 200);
  });

  after(async () => {
    await api?.close();
    await engine?.close({ destroyVms: true });
    await rm(dir, { recursive: true, force: true });
  });

  it('an idle sandbox is hibernated after its policy, and the next exec runs in it with its files', async () => {
    const id = await claim('idle/files');
    const wrote = await exec(id, 'echo kept-across-suspend > /root/note && cat /root/note');
    assert.equal(wrote.status, 200, JSON.stringify(wrote.json));
    const vm = engine.vm(id);
    const pid = vm.pid!;
    // What an idle guest costs its host under TCG, for the --idle-cpu-percent default (PERFORMANCE.md "Idle suspend").
    const c0 = pidCpuMs(pid)!;
    const t0 = performance.now();
    await new Promise((r) => setTimeout(r, 2000));
    const idlePercent = ((pidCpuMs(pid)! - c0) / (performance.now() - t0)) * 100;
    console.log(`# idle guest QEMU CPU: ${idlePercent.toFixed(1)} % of one core (threshold ${10} %)`);
    assert.ok(idlePercent < 10, `an idle guest stays under the default threshold (${idlePercent.toFixed(1)} %)`);

    const t1 = Date.now();
    await suspended(id, 'the idle sandbox hibernated by its policy');
    const after = Date.now() - t1;
    assert.ok(after >= (IDLE_SECONDS - 2.1) * 1000, `not before its policy (${after} ms after the last exec)`);
    assert.equal(engine.vm(id).state, 'hibernated');
    assert.equal(engine.vm(id).pid, undefined, 'no QEMU process while suspended');
    const info = (await call('GET', '/v1/info')).json;
    assert.equal(info.hibernated, 1);

    const w0 = performance.now();
    const read = await exec(id, 'cat /root/note');
    const wakeMs = performance.now() - w0;
    console.log(`# exec on a suspended sandbox (wake + command): ${wakeMs.toFixed(0)} ms`);
    assert.equal(read.status, 200, `the exec waited for the wake instead of failing: ${JSON.stringify(read.json)}`);
    assert.equal(read.json.stdout, 'kept-across-suspend\n');
    assert.equal(await phase(id), 'Running');
    assert.equal(engine.idle.counters.woken, 1);
    const metrics = await api.registry.metrics();
    assert.match(metrics, /^sandboxd_idle_suspends_total\{result="ok"\} 1$/m);
    assert.match(metrics, /^sandboxd_idle_wakes_total\{result="ok"\} 1$/m);
    await call('POST', `/v1/sandboxes/${id}/release`);
  });

  it('a busy guest and an open session keep it awake', async () => {
    const id = await claim('idle/busy');
    // A guest computing with nobody attached is working for someone.
    const spin = await exec(id, "sh -c 'while :; do :; done' >/dev/null 2>&1 & echo $! > /tmp/spin.pid");
    assert.equal(spin.status, 200, JSON.stringify(spin.json));
    await new Promise((r) => setTimeout(r, (IDLE_SECONDS + 8) * 1000));
    assert.equal(await phase(id), 'Running', 'not suspended while its guest computes');
    // A quiet command that runs longer than the policy: the session is open, so it is in use.
    const slow = await exec(id, `kill $(cat /tmp/spin.pid); sleep ${IDLE_SECONDS + 5}; echo done`, 60);
    assert.equal(slow.status, 200, JSON.stringify(slow.json));
    assert.equal(slow.json.stdout, 'done\n', 'the session was not cut by a suspend');
    await suspended(id, 'suspended once the guest is quiet and the session closed');
    await call('POST', `/v1/sandboxes/${id}/release`);
  });

  it('a suspended sandbox holds no running slot; a wake with none left is refused and loses nothing', async () => {
    const a = await claim('idle/a');
    assert.equal((await exec(a, 'echo a > /root/a')).status, 200);
    await suspended(a, 'a suspended');
    // The node runs at most one sandbox: with a suspended, a second claim still gets the slot.
    const b = await call('POST', '/v1/claim', { ...KEY, claim_ref: 'idle/b', ttl_seconds: 600 });
    assert.equal(b.status, 200, `a claim beside a suspended sandbox: ${JSON.stringify(b.json)}`);
    const refused = await exec(a, 'cat /root/a');
    assert.equal(refused.status, 429, JSON.stringify(refused.json));
    assert.match(String(refused.json.error), /release or hibernate one, then resume/);
    assert.equal(await phase(a), 'Suspended', 'still suspended, still listed');
    assert.equal(engine.idle.counters.wakeFailures, 1);
    await call('POST', `/v1/sandboxes/${b.json.id as string}/release`);
    const again = await exec(a, 'cat /root/a');
    assert.equal(again.status, 200, JSON.stringify(again.json));
    assert.equal(again.json.stdout, 'a\n');
    await call('POST', `/v1/sandboxes/${a}/release`);
  });

  it("a caller's pause of a suspended sandbox is a pause: no request wakes it until it is resumed", async () => {
    const id = await claim('idle/paused');
    await suspended(id, 'suspended');
    assert.equal((await call('POST', `/v1/sandboxes/${id}/pause`)).status, 200);
    assert.equal(await phase(id), 'Hibernated');
    const refused = await exec(id, 'true');
    assert.equal(refused.status, 409, JSON.stringify(refused.json));
    assert.equal((await call('POST', `/v1/sandboxes/${id}/resume`)).status, 200);
    assert.equal((await exec(id, 'true')).status, 200);
    await call('POST', `/v1/sandboxes/${id}/release`);
  });

  it("a suspended sandbox's saved state is on the data dir's disk, not under /run, and goes with its release", async () => {
    const id = await claim('idle/state');
    await suspended(id, 'suspended');
    const stateFile = engine.vm(id).record.hibernateFile!;
    assert.equal(dirname(stateFile), join(dir, 'hibernated'), stateFile);
    assert.ok(statSync(stateFile).size > 0);
    assert.equal((await call('POST', `/v1/sandboxes/${id}/release`)).status, 204);
    await eventually(() => existsSync(stateFile), {
      until: (e) => !e,
      timeoutMs: 10_000,
      what: 'the state file removed',
    });
  });

  it('refuses a policy out of range', async () => {
    const r = await call('POST', '/v1/claim', { ...KEY, idle_hibernate_seconds: 604_801 });
    assert.equal(r.status, 400);
    assert.match(String(r.json.error), /idle_hibernate_seconds: must be an integer >= 0 and <= 604800/);
  });
});
