import assert from 'node:assert/strict';
import { chmod, mkdtemp, readdir, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { listClusterNamespaces, listProcesses, readClusterEnvironment, startCluster } from '../../src/cluster/index.js';
import { SandboxError } from '../../src/errors.js';
import { getTestCluster, type TestCluster } from '../support/cluster.js';

/** A bin dir with the real binaries symlinked in, so one of them can be swapped for a bad one. */
async function binDirWith(cluster: TestCluster, replace: Record<string, string | null>): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'sbx-badbin-'));
  const kwokDir = dirname(cluster.binaries.kwok ?? '');
  for (const [name, path] of Object.entries(cluster.binaries)) {
    if (name in replace) continue;
    await symlink(path, join(dir, name));
  }
  for (const f of await readdir(kwokDir)) if (f.endsWith('.yaml')) await symlink(join(kwokDir, f), join(dir, f));
  for (const [name, script] of Object.entries(replace)) {
    if (script === null) continue;
    await writeFile(join(dir, name), script);
    await chmod(join(dir, name), 0o755);
  }
  return dir;
}

async function expectStartFailure(binDir: string): Promise<SandboxError> {
  const env = readClusterEnvironment();
  const before = new Set(await listClusterNamespaces());
  const dataDir = await mkdtemp(join(tmpdir(), 'sbx-bad-data-'));
  try {
    await startCluster({ cacheDir: env.cacheDir, binDir, dataDir, simulatedNodes: 0, readyTimeoutMs: 30_000 });
    assert.fail('startCluster should have failed');
  } catch (err) {
    assert.ok(err instanceof SandboxError, `expected a SandboxError, got ${String(err)}`);
    // Nothing left behind: no new network namespace, no process whose command line names this data dir.
    assert.deepEqual(
      (await listClusterNamespaces()).filter((n) => !before.has(n)),
      [],
    );
    for (const p of await listProcesses())
      assert.ok(!p.cmd.includes(basename(dataDir)), `process ${p.pid} still running: ${p.cmd}`);
    return err;
  } finally {
    await rm(dataDir, { recursive: true, force: true });
    await rm(binDir, { recursive: true, force: true });
  }
}

describe('control plane bad input: clear errors, nothing left running', () => {
  let cluster: TestCluster;
  before(async () => {
    cluster = await getTestCluster();
  });
  after(() => {});

  it('a missing binary names the binary and where it was looked for', async () => {
    const err = await expectStartFailure(await binDirWith(cluster, { 'kube-apiserver': null }));
    assert.equal(err.code, 'cluster.binary-missing');
    assert.match(err.message, /kube-apiserver not found/);
    assert.match(err.hint ?? '', /SANDBOX_K8S_BIN_DIR/);
  });

  it('a broken binary (does not run) is named with its output', async () => {
    const err = await expectStartFailure(
      await binDirWith(cluster, {
        etcd: '#!/bin/sh\necho "segmentation fault (simulated corruption)" >&2\nexit 139\n',
      }),
    );
    assert.equal(err.code, 'cluster.binary-broken');
    assert.match(err.message, /etcd at .* does not run: .*segmentation fault/);
  });

  it('a port in use: the real kube-apiserver fails to bind and the error says so', async () => {
    // A wrapper that makes the real apiserver bind etcd's client port, which etcd already holds: it waits until etcd
    // listens there (both start together, and a loaded machine may start the apiserver first, when etcd would be
    // the one refused).
    const real = cluster.binaries['kube-apiserver'];
    const waitEtcd =
      'i=0; until /bin/busybox nc -w 1 127.0.0.1 2379 </dev/null >/dev/null 2>&1 || [ $i -ge 300 ]; do sleep 0.1; i=$((i+1)); done';
    const wrapper = `#!/bin/sh\nif [ "$1" = "--version" ]; then exec ${real} --version; fi\n${waitEtcd}\nexec ${real} "$@" --secure-port=2379\n`;
    const err = await expectStartFailure(await binDirWith(cluster, { 'kube-apiserver': wrapper }));
    assert.equal(err.code, 'cluster.process-died');
    assert.match(err.message, /kube-apiserver exited/);
    assert.match(err.message, /address already in use/);
    assert.match(err.hint ?? '', /port it needs is in use/);
  });

  it('a failed build names the component and shows the compiler output', async () => {
    const { obtain } = await import('../../src/cluster/index.js');
    const cacheDir = await mkdtemp(join(tmpdir(), 'sbx-badcache-'));
    // A Go proxy that refuses everything makes `go mod tidy` fail fast, as an unreachable proxy would.
    const saved = { GOPROXY: process.env.GOPROXY, GOMODCACHE: process.env.GOMODCACHE };
    process.env.GOPROXY = 'off';
    process.env.GOMODCACHE = join(cacheDir, 'empty-modcache');
    try {
      await assert.rejects(
        obtain('kwok', { cacheDir: join(cacheDir, 'fresh'), progress: () => {} }),
        (err: unknown) => {
          assert.ok(err instanceof SandboxError);
          assert.equal(err.code, 'cluster.build');
          assert.match(err.message, /kwok v0\.8\.0/);
          return true;
        },
      );
    } finally {
      for (const [k, v] of Object.entries(saved)) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
      await rm(cacheDir, { recursive: true, force: true });
    }
  });
});
