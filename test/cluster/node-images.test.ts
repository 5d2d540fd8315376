import assert from 'node:assert/strict';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { cachedBinaries, obtain, type BinaryPaths } from '../../src/cluster/binaries.js';
import { BUSYBOX_TEST_IMAGE, nodeImageArchives, type NodeImage } from '../../src/cluster/node-images.js';
import { PAUSE_IMAGE } from '../../src/cluster/nodes/node-config.js';
import { readClusterEnvironment } from '../../src/cluster/options.js';
import { CONTAINERD_VERSION } from '../../src/cluster/versions.js';
import { parseOciArchive } from '../support/oci-archive.js';

// The images real nodes import, built into a temp cache, then imported by a real containerd (the pinned build from
// the Go module proxy) started just for this file: its own root, state and sockets in a temp dir, the CRI and NRI
// left out, so it touches nothing of the machine's. No container is run here; real nodes do that (the lead's
// real-node tests). Without a cached containerd the import test skips, except under CI, where it builds it.

const exec = promisify(execFile);
const CI = process.env.CI === 'true';

let work: string;
let images: NodeImage[];

before(async () => {
  work = await mkdtemp(join(tmpdir(), 'sbx-nimg-'));
  images = await nodeImageArchives(join(work, 'cache'), () => {});
});
after(async () => {
  await rm(work, { recursive: true, force: true });
});

/** The pause image's /pause, copied out of the archive to run it here. */
async function pauseFromImage(name: string): Promise<string> {
  const pause = await parseOciArchive(images[0]!.archive);
  const bin = join(work, name);
  await writeFile(bin, pause.layer.get('pause')!.body);
  await chmod(bin, 0o755);
  return bin;
}

describe('node images', () => {
  it('are the pause image and the busybox test image, as valid single-layer OCI archives', async () => {
    assert.deepEqual(
      images.map((i) => i.name),
      [PAUSE_IMAGE, BUSYBOX_TEST_IMAGE],
    );
    const pause = await parseOciArchive(images[0]!.archive);
    assert.deepEqual(pause.config.config.Entrypoint, ['/pause']);
    assert.equal(pause.layer.get('pause')?.header.mode, 0o755);
    const bb = await parseOciArchive(images[1]!.archive);
    assert.deepEqual(bb.config.config.Cmd, ['sh']);
    for (const applet of ['bin/sh', 'usr/bin/nc', 'bin/sleep', 'bin/cat', 'bin/ls', 'usr/bin/wget', 'usr/bin/nslookup'])
      assert.equal(bb.layer.get(applet)?.header.linkname, '/bin/busybox', `${applet} links to busybox`);
    assert.equal(bb.layer.get('tmp/')?.header.mode, 0o1777);
  });

  it('are cached by their inputs: a second call builds nothing and returns the same archives', async () => {
    const again = await nodeImageArchives(join(work, 'cache'), (l) => assert.fail(`rebuilt: ${l}`));
    assert.deepEqual(again, images);
  });

  it("hold a pause program that exits 0 on SIGTERM (the pod's stop) and reports its version", async () => {
    const bin = await pauseFromImage('pause');
    assert.match((await exec(bin, ['-v'])).stdout, /^pause 3\.10\.1/);
    const child = spawn(bin, [], { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    // Its start-up line comes once its signal handlers are in place.
    await new Promise<void>((resolve) => child.stderr.once('data', () => resolve()));
    child.kill('SIGTERM');
    const [code, signal] = (await new Promise((resolve) => child.once('exit', (c, s) => resolve([c, s])))) as [
      number | null,
      string | null,
    ];
    assert.deepEqual({ code, signal }, { code: 0, signal: null }, stderr);
  });

  it('hold a pause program that, as PID 1 of a PID namespace, reaps the orphans reparented to it', async () => {
    const bin = await pauseFromImage('pause-init');
    // unshare forks pause as PID 1 of a new PID namespace, as a pod sandbox starts it.
    const holder = spawn('unshare', ['--pid', '--fork', bin], { stdio: ['ignore', 'ignore', 'pipe'] });
    let pausePid: number | undefined;
    try {
      await new Promise<void>((resolve) => holder.stderr.once('data', () => resolve()));
      const children = async (pid: number) =>
        (await readFile(`/proc/${pid}/task/${pid}/children`, 'utf8')).split(' ').filter(Boolean).map(Number);
      [pausePid] = await children(holder.pid!);
      assert.ok(pausePid, 'pause is not running under unshare');
      // A shell in the namespace starts `sleep` and exits: the sleep is orphaned and reparented to pause. (Its
      // output goes nowhere, or exec would wait for the sleep to close the pipes.)
      await exec('nsenter', ['-t', String(pausePid), '--pid', '--', 'sh', '-c', 'sleep 1 >/dev/null 2>&1 & exit 0']);
      const [orphan] = await children(pausePid);
      assert.ok(orphan, 'the orphaned sleep was not reparented to pause');
      // When it exits, pause must wait() for it, or it would stay a zombie (state Z) for the pod's life.
      const deadline = Date.now() + 10_000;
      while (existsSync(`/proc/${orphan}`)) {
        const state = (await readFile(`/proc/${orphan}/stat`, 'utf8').catch(() => '')).split(') ')[1]?.[0];
        assert.ok(Date.now() < deadline, `the orphan ${orphan} was not reaped (state ${state})`);
        await new Promise((r) => setTimeout(r, 100));
      }
    } finally {
      // unshare --fork ignores SIGTERM while it waits: stop pause itself, and unshare exits with it.
      const exited = new Promise((r) => holder.once('exit', r));
      if (pausePid) process.kill(pausePid, 'SIGTERM');
      else holder.kill('SIGKILL');
      await exited;
    }
  });

  describe('imported by a real containerd', () => {
    let bins: BinaryPaths | undefined;
    let containerd: ChildProcess | undefined;
    let sock: string;
    let log = '';
    const ctr = (...args: string[]) => exec(bins!.ctr!, ['-a', sock, '-n', 'k8s.io', ...args], { timeout: 30_000 });

    before(async () => {
      const cacheDir = readClusterEnvironment().cacheDir;
      bins = CI
        ? await obtain('containerd', { cacheDir, progress: (l) => process.stderr.write(`${l}\n`) })
        : await cachedBinaries('containerd', cacheDir);
      if (!bins) return;
      const dir = join(work, 'ctd');
      sock = join(dir, 'containerd.sock');
      const config = join(work, 'containerd.toml');
      await writeFile(
        config,
        [
          'version = 3',
          `root = ${JSON.stringify(join(dir, 'root'))}`,
          `state = ${JSON.stringify(join(dir, 'state'))}`,
          'imports = []',
          // No CRI (it would want CNI and a pause image) and no NRI (its socket is /var/run/nri/nri.sock).
          "disabled_plugins = ['io.containerd.grpc.v1.cri', 'io.containerd.cri.v1.runtime', 'io.containerd.cri.v1.images', 'io.containerd.nri.v1.nri']",
          '[grpc]',
          `  address = ${JSON.stringify(sock)}`,
          '[ttrpc]',
          `  address = ${JSON.stringify(`${sock}.ttrpc`)}`,
          // The default is /opt/containerd on the machine.
          "[plugins.'io.containerd.internal.v1.opt']",
          `  path = ${JSON.stringify(join(dir, 'opt'))}`,
          '',
        ].join('\n'),
      );
      containerd = spawn(bins.containerd!, ['--config', config], { stdio: ['ignore', 'pipe', 'pipe'] });
      const keep = (d: Buffer) => (log = (log + d.toString()).slice(-8000));
      containerd.stdout!.on('data', keep);
      containerd.stderr!.on('data', keep);
      const deadline = Date.now() + 20_000;
      while (!existsSync(sock)) {
        assert.equal(containerd.exitCode, null, `containerd exited: ${log}`);
        assert.ok(Date.now() < deadline, `containerd did not open ${sock}: ${log}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    });
    after(async () => {
      if (!containerd || containerd.exitCode !== null) return;
      const exited = new Promise((r) => containerd!.once('exit', r));
      containerd.kill('SIGTERM');
      await exited;
    });

    it('names them as the nodes expect and unpacks their layers', async (t) => {
      if (!bins) {
        t.skip(
          `containerd ${CONTAINERD_VERSION} is not cached: run \`node --import tsx scripts/obtain-binaries.ts containerd\``,
        );
        return;
      }
      assert.match((await exec(bins.containerd!, ['--version'])).stdout, new RegExp(` ${CONTAINERD_VERSION}\\b`));
      for (const image of images) await ctr('images', 'import', image.archive);
      const names = (await ctr('images', 'ls', '-q')).stdout.split('\n').filter(Boolean).sort();
      assert.deepEqual(names, [BUSYBOX_TEST_IMAGE, PAUSE_IMAGE].sort(), log);
      // Unpacked into the default snapshotter: a single-layer image's snapshot is keyed by its diff_id (chain ID),
      // which containerd recomputes while unpacking, so a wrong diff_id would have failed the import.
      const snapshots = (await ctr('snapshots', 'ls')).stdout;
      for (const image of images) {
        const diffId = (await parseOciArchive(image.archive)).config.rootfs.diff_ids[0]!;
        assert.ok(snapshots.includes(diffId), `${image.name}: no snapshot ${diffId} in\n${snapshots}`);
      }
    });
  });
});
