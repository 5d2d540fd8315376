/**
 * The filesystem-only pause on real microVMs (docs/sandboxd-api.md "Filesystem pause"; e2b's `pause({keepMemory:
 * false})`): `POST /v1/sandboxes/{id}/pause {mode: "filesystem"}` saves the guest's writable layer on the node's disk
 * and destroys the VM (its QEMU process gone), the claim kept through a daemon restart; resume boots a fresh VM with
 * the files back (new, changed and deleted image files, modes, owners), the processes gone. A layer over the node's
 * cap is refused with nothing lost: the sandbox runs on with its files.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { NodeEngine } from '../../src/sandboxd/engine.js';
import { SandboxdApi } from '../../src/sandboxd/http-api.js';
import { eventually } from '../support/eventually.js';
import { call as callApi } from '../support/sandboxd-daemon.js';

const ROOT = 'root-token-for-files-pause';
const KEY = { template: 'sandbox/base', net: 'none', size: 'small' } as const;
const MAX_LAYER_MIB = 8;

describe('filesystem-only pause (real microVMs)', () => {
  let dir: string;
  let engine: NodeEngine;
  let api: SandboxdApi;
  let base: string;

  async function startNode(): Promise<void> {
    engine = new NodeEngine({
      dataDir: dir,
      nodeName: 'files-pause-node',
      advertiseAddr: '127.0.0.1:7777',
      maxLayerMiB: MAX_LAYER_MIB,
    });
    await engine.start();
    api = new SandboxdApi({ engine, auth: { rootToken: ROOT, tenants: new Map(), allowAnonymous: false } });
    base = `http://127.0.0.1:${(await api.listen('127.0.0.1', 0)).port}`;
  }

  const call = (method: string, path: string, body?: unknown) => callApi(base, method, path, body, ROOT);

  async function sh(id: string, script: string): Promise<string> {
    const r = await call('POST', `/v1/sandboxes/${id}/exec`, { argv: ['sh', '-c', script] });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    assert.equal(r.json.exit_code, 0, `${script}: ${JSON.stringify(r.json)}`);
    return r.json.stdout as string;
  }

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sbxd-files-pause-'));
    await startNode();
  });

  after(async () => {
    await api?.close();
    await engine?.close({ destroyVms: true });
    await rm(dir, { recursive: true, force: true });
  });

  it('keeps the files, frees the VM, survives a restart, and reboots with them', async () => {
    const rec = await engine.claim({ key: KEY, ttlSeconds: 900 });
    const id = rec.id;
    const before = await sh(
      id,
      [
        'echo "my notes" > /root/notes.txt && chown 1000:1000 /root/notes.txt && chmod 600 /root/notes.txt',
        'ln -s notes.txt /root/link',
        'mkdir -p /etc/app && echo \'{"a":1}\' > /etc/app/config.json',
        'head -c 3145728 /dev/urandom > /root/blob',
        'echo scratch > /tmp/scratch',
        'rm /etc/debian_version',
        'sleep 1000 > /dev/null 2>&1 &',
        'echo $! > /root/sleep.pid',
        'sha256sum /root/blob | cut -d" " -f1; cat /proc/sys/kernel/random/boot_id',
      ].join('\n'),
    );
    const [blobSum, bootId] = before.trim().split('\n');
    const oldVm = engine.vm(id);
    const oldPid = oldVm.pid;
    assert.ok(oldPid, 'the VM has a QEMU process');

    let t = Date.now();
    const paused = await call('POST', `/v1/sandboxes/${id}/pause`, { mode: 'filesystem' });
    const pauseMs = Date.now() - t;
    assert.equal(paused.status, 200, JSON.stringify(paused.json));
    assert.equal(paused.json.mode, 'filesystem');
    const row = paused.json.sandbox as Record<string, unknown>;
    assert.equal(row.phase, 'Hibernated');
    assert.equal(row.pause_mode, 'filesystem');
    const bytes = row.layer_bytes as number;
    assert.ok(bytes > 3 << 20 && bytes < MAX_LAYER_MIB << 20, `layer of ${bytes} bytes`);
    // The VM is gone: its QEMU process and the driver's handle; the claim stays, and refuses commands meanwhile.
    assert.equal(engine.driver.get(oldVm.id), undefined);
    await eventually(async () => !processAlive(oldPid!), { timeoutMs: 10_000, what: 'the QEMU process to exit' });
    const refused = await call('POST', `/v1/sandboxes/${id}/exec`, { argv: ['true'] });
    assert.equal(refused.status, 409, JSON.stringify(refused.json));
    const metrics = await call('GET', `/v1/sandboxes/${id}/metrics`);
    assert.equal(metrics.status, 200, JSON.stringify(metrics.json));
    assert.deepEqual([metrics.json.mem_used_bytes, metrics.json.disk_used_bytes], [0, bytes], 'no VM: its files only');
    assert.deepEqual(await readdir(join(dir, 'layers')), [`${id}.tar`]);

    // A restart of the daemon keeps the paused claim (no VM to adopt: its record and saved files).
    await api.close();
    await engine.close({ destroyVms: false });
    await startNode();
    assert.equal(engine.get(id)?.filesOnly, true, 'the files-only claim after the restart');
    assert.equal(engine.get(id)?.token, rec.token, 'the same claim (its token)');

    t = Date.now();
    const resumed = await call('POST', `/v1/sandboxes/${id}/resume`);
    const resumeMs = Date.now() - t;
    assert.equal(resumed.status, 200, JSON.stringify(resumed.json));
    assert.equal((resumed.json.sandbox as Record<string, unknown>).phase, 'Running');
    assert.equal((resumed.json.sandbox as Record<string, unknown>).pause_mode, undefined);
    assert.notEqual(engine.get(id)!.vmId, oldVm.id, 'a new VM');
    assert.deepEqual(await readdir(join(dir, 'layers')), [], 'the saved files are deleted once applied');

    const after = await sh(
      id,
      [
        'cat /root/notes.txt; stat -c "%a %u:%g" /root/notes.txt; readlink /root/link',
        'cat /etc/app/config.json; cat /tmp/scratch',
        'sha256sum /root/blob | cut -d" " -f1',
        'test -e /etc/debian_version && echo debian_version-back || echo debian_version-gone',
        'test -e /etc/passwd && echo passwd-kept',
        // comm, not cmdline: this shell may have the old sleep's pid in the new VM, and its cmdline names sleep.
        'pid=$(cat /root/sleep.pid); if grep -qsx sleep /proc/$pid/comm; then echo sleep-running; else echo sleep-gone; fi',
        'cat /proc/sys/kernel/random/boot_id',
      ].join('\n'),
    );
    const lines = after.trim().split('\n');
    assert.deepEqual(lines.slice(0, 9), [
      'my notes',
      '600 1000:1000',
      'notes.txt',
      '{"a":1}',
      'scratch',
      blobSum,
      'debian_version-gone',
      'passwd-kept',
      'sleep-gone',
    ]);
    assert.notEqual(lines[9], bootId, 'a reboot (a new kernel boot id)');
    console.log(`files-pause: ${bytes} bytes saved; pause ${pauseMs} ms, resume ${resumeMs} ms (warm: none, a clone)`);

    // Releasing a files-only sandbox deletes its saved files.
    await sh(id, 'echo again > /root/again');
    assert.equal((await call('POST', `/v1/sandboxes/${id}/pause`, { mode: 'filesystem' })).status, 200);
    assert.equal((await readdir(join(dir, 'layers'))).length, 1);
    await engine.release(id);
    assert.deepEqual(await readdir(join(dir, 'layers')), []);
  });

  it('refuses a layer over the cap and the sandbox runs on with its files', async () => {
    const rec = await engine.claim({ key: KEY, ttlSeconds: 900 });
    await sh(rec.id, `head -c ${(MAX_LAYER_MIB + 4) << 20} /dev/urandom > /root/big && echo kept > /root/small`);
    const vmId = rec.vmId;
    const r = await call('POST', `/v1/sandboxes/${rec.id}/pause`, { mode: 'filesystem' });
    assert.equal(r.status, 413, JSON.stringify(r.json));
    assert.match(r.json.error as string, /over 8388608 bytes.*not paused/);
    assert.equal(engine.get(rec.id)?.filesOnly, undefined);
    assert.equal(engine.get(rec.id)?.vmId, vmId, 'the same VM');
    assert.equal(await sh(rec.id, 'cat /root/small; stat -c %s /root/big'), `kept\n${(MAX_LAYER_MIB + 4) << 20}\n`);
    assert.deepEqual(await readdir(join(dir, 'layers')), [], 'nothing of the refused save left on disk');
    // A mode the node does not know is a 400, not a pause of another kind.
    const bad = await call('POST', `/v1/sandboxes/${rec.id}/pause`, { mode: 'disk' });
    assert.equal(bad.status, 400, JSON.stringify(bad.json));
    await engine.release(rec.id);
  });
});

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
