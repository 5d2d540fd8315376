/**
 * e2b's filesystem-only pause end to end (issue 31), with the unmodified SDKs (npm e2b, pinned; PyPI e2b 2.63)
 * against the aggregated layout with real microVMs: `pause({keepMemory: false})` (Python `mode="filesystem"`) keeps
 * the sandbox's files and frees its VM (the node runs one QEMU process fewer); `getInfo` reports `pauseMode:
 * 'filesystem'`; connect reboots it with its files (written, changed and deleted image files), its processes gone.
 * `onTimeout: {action: 'pause', keepMemory: false}` does the same at the lease's end, and `onResume: 'reboot'` turns
 * a memory pause into a reboot from the files. docs/e2b.md "Control plane".
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Sandbox } from 'e2b';
import { e2bOptions, e2bSandboxes, getAggregated, type AggregatedEnv } from '../support/aggregated.js';
import { pySdk, runPython } from '../support/e2b-sdks.js';
import { eventually } from '../support/eventually.js';

let env: AggregatedEnv;
const opts = () => e2bOptions(env);
const sandboxes = e2bSandboxes(() => env);
const create = sandboxes.create;

/** The QEMU processes of the platform's nodes (their pids), from /proc. */
async function qemuPids(): Promise<Set<number>> {
  const { readdir, readFile } = await import('node:fs/promises');
  const pids = new Set<number>();
  for (const d of await readdir('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    const cmd = await readFile(`/proc/${d}/cmdline`, 'utf8').catch(() => '');
    if (cmd.startsWith('qemu-system') || cmd.includes('/qemu-system')) pids.add(Number(d));
  }
  return pids;
}

/** Writes files (in /root, /etc, /tmp), deletes an image file, starts a background process. */
async function prepare(sbx: Sandbox): Promise<{ blob: string; bootId: string }> {
  await sbx.files.write('/root/notes.txt', 'my notes');
  await sbx.files.write('/etc/app/config.json', '{"a":1}');
  const r = await sbx.commands.run(
    [
      'set -e',
      'head -c 2097152 /dev/urandom > /tmp/blob',
      'rm /etc/debian_version',
      'sleep 1000 > /dev/null 2>&1 &',
      'echo $! > /root/sleep.pid',
      'sha256sum /tmp/blob | cut -d" " -f1; cat /proc/sys/kernel/random/boot_id',
    ].join('\n'),
    // root: an image file is root's to delete (the SDK's default user is `user`).
    { user: 'root' },
  );
  const [blob, bootId] = r.stdout.trim().split('\n');
  return { blob: blob!, bootId: bootId! };
}

/** What the rebooted sandbox holds: the files back, the deleted one still gone, the process not running. */
async function assertRebooted(sbx: Sandbox, before: { blob: string; bootId: string }): Promise<void> {
  assert.equal(await sbx.files.read('/root/notes.txt'), 'my notes');
  assert.equal(await sbx.files.read('/etc/app/config.json'), '{"a":1}');
  const r = await sbx.commands.run(
    [
      'sha256sum /tmp/blob | cut -d" " -f1',
      'test -e /etc/debian_version && echo back || echo gone',
      // comm, not cmdline: this very shell may have the old sleep's pid in the new VM, and its cmdline names sleep.
      'pid=$(cat /root/sleep.pid); if grep -qsx sleep /proc/$pid/comm; then echo running; else echo not-running; fi',
      'cat /proc/sys/kernel/random/boot_id',
    ].join('\n'),
  );
  const [blob, deleted, sleeper, bootId] = r.stdout.trim().split('\n');
  assert.deepEqual([blob, deleted, sleeper], [before.blob, 'gone', 'not-running']);
  assert.notEqual(bootId, before.bootId, 'rebooted: a new kernel boot id');
}

describe('e2b filesystem-only pause (aggregated layout, real microVMs)', () => {
  before(async () => {
    env = await getAggregated();
  });
  after(async () => {
    await sandboxes.killAll();
  });

  it('pause({keepMemory: false}) frees the VM; connect reboots it with its files', async () => {
    const sbx = await create({ timeoutMs: 600_000 });
    const before = await prepare(sbx);
    const running = await qemuPids();
    let t = Date.now();
    assert.equal(await sbx.pause({ keepMemory: false }), true);
    const pauseMs = Date.now() - t;
    assert.equal(await sbx.pause({ keepMemory: false }), false, 'already paused: 409');
    const info = await sbx.getInfo();
    assert.equal(info.state, 'paused');
    const raw = (await (
      await fetch(`${env.e2b.apiUrl}/sandboxes/${sbx.sandboxId}`, { headers: { 'x-api-key': env.e2b.apiKey } })
    ).json()) as Record<string, unknown>;
    assert.equal(raw.pauseMode, 'filesystem');
    // One QEMU process fewer: the sandbox's (warm pools refill only on claims, which nothing makes meanwhile).
    const gone = [...running].filter((p) => !alive(p));
    assert.ok(gone.length >= 1, 'a QEMU process exited with the pause');
    t = Date.now();
    const back = await Sandbox.connect(sbx.sandboxId, { ...opts(), timeoutMs: 600_000 });
    const resumeMs = Date.now() - t;
    assert.equal((await back.getInfo()).state, 'running');
    await assertRebooted(back, before);
    console.log(`e2b files-pause: pause ${pauseMs} ms, connect (reboot with files) ${resumeMs} ms`);
  });

  it('onTimeout {action: pause, keepMemory: false} pauses with the files only at the lease end', async () => {
    const sbx = await create({ timeoutMs: 600_000, lifecycle: { onTimeout: { action: 'pause', keepMemory: false } } });
    assert.equal((await sbx.getInfo()).lifecycle?.onTimeout, 'pause');
    const before = await prepare(sbx);
    await sbx.setTimeout(1_000);
    await eventually(() => sbx.getInfo(), { until: (i) => i.state === 'paused', timeoutMs: 60_000, what: 'the pause' });
    const raw = (await (
      await fetch(`${env.e2b.apiUrl}/sandboxes/${sbx.sandboxId}`, { headers: { 'x-api-key': env.e2b.apiKey } })
    ).json()) as Record<string, unknown>;
    assert.equal(raw.pauseMode, 'filesystem');
    const back = await Sandbox.connect(sbx.sandboxId, { ...opts(), timeoutMs: 600_000 });
    await assertRebooted(back, before);
  });

  it("onResume 'reboot' resumes a memory pause from the files only", async () => {
    const sbx = await create({ timeoutMs: 600_000 });
    const before = await prepare(sbx);
    assert.equal(await sbx.pause(), true);
    const raw = (await (
      await fetch(`${env.e2b.apiUrl}/sandboxes/${sbx.sandboxId}`, { headers: { 'x-api-key': env.e2b.apiKey } })
    ).json()) as Record<string, unknown>;
    assert.equal(raw.pauseMode, 'full');
    const back = await Sandbox.connect(sbx.sandboxId, { ...opts(), onResume: 'reboot' } as never);
    await assertRebooted(back, before);
  });

  it('Python SDK 2.63: pause(mode="filesystem"), connect: the file is back, the process is not', async () => {
    const python = await pySdk('2.63.0');
    const out = await runPython(
      python,
      `
import json
from e2b import Sandbox
sbx = Sandbox.create("base", timeout=600)
out = {}
try:
    sbx.files.write("/root/py.txt", "from python")
    pid = sbx.commands.run("sleep 1000 > /dev/null 2>&1 & echo $!").stdout.strip()
    out["paused"] = sbx.pause(mode="filesystem")
    out["state"] = sbx.get_info().state.value
    sbx.connect()
    out["read"] = sbx.files.read("/root/py.txt")
    out["sleeping"] = sbx.commands.run(f"grep -qsx sleep /proc/{pid}/comm && echo yes || echo no").stdout.strip()
finally:
    sbx.kill()
print(json.dumps(out))
`,
      { E2B_API_URL: env.e2b.apiUrl, E2B_SANDBOX_URL: env.e2b.sandboxUrl, E2B_API_KEY: env.e2b.apiKey },
    );
    assert.deepEqual(out, { paused: true, state: 'paused', read: 'from python', sleeping: 'no' });
  });
});

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
