/**
 * kill -9 of the process that runs the virtual nodes, with 5 microVM pods running: after a restart the 5 Pods are
 * still Ready on the same VMs (same claim ids, same QEMU processes), a Pod force-deleted while the daemon was down
 * gets its VM destroyed, and no QEMU process is left once everything is deleted.
 *
 * The daemon is this file run as a plain script (VK_RESTART_DAEMON set): engine + virtual nodes, as sandboxd
 * composes them, so the test does not depend on sandboxd's flags.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { KubeClient, Pods } from '../../src/kube/index.js';
import { createLogger } from '../../src/log/logger.js';
import { NodeEngine } from '../../src/sandboxd/engine.js';
import { startVirtualNodes } from '../../src/sandboxd/vk/index.js';
import type { Pod } from '../../src/sandboxd/vk/types.js';
import { pidAlive } from '../../src/vmm/index.js';

interface DaemonConfig {
  kubeconfig: string;
  hostAddress: string;
  dataDir: string;
  nodeName: string;
  cert: string;
  key: string;
  ca: string;
}

/** The QEMU processes whose command line names this test's data dir. */
function qemuPidsUnder(dir: string): number[] {
  const out: number[] = [];
  for (const e of readdirSync('/proc')) {
    const pid = Number(e);
    if (!Number.isInteger(pid)) continue;
    try {
      const cmd = readFileSync(`/proc/${pid}/cmdline`, 'latin1');
      const argv0 = cmd.split('\0')[0] ?? '';
      if (/(^|\/)qemu-system-[^/]*$/.test(argv0) && cmd.includes(dir)) out.push(pid);
    } catch {
      // gone
    }
  }
  return out.sort((a, b) => a - b);
}

/** QEMU processes under `dir` split into pod VMs and spare VMMs (`sbx.spare` in their vm.json). */
function qemuUnder(dir: string): { vms: number[]; spares: number[] } {
  const vms: number[] = [];
  const spares: number[] = [];
  for (const pid of qemuPidsUnder(dir)) {
    let spare = false;
    try {
      const id = /sbx-([^,\0]+),process=/.exec(readFileSync(`/proc/${pid}/cmdline`, 'latin1'))?.[1];
      const rec = JSON.parse(readFileSync(join(dir, 'vms', id ?? '-', 'vm.json'), 'utf8')) as {
        labels?: Record<string, string>;
      };
      spare = rec.labels?.['sbx.spare'] === 'true';
    } catch {
      // no record (yet or any more): count it as a VM
    }
    (spare ? spares : vms).push(pid);
  }
  return { vms, spares };
}

async function daemonMain(cfg: DaemonConfig): Promise<void> {
  const log = createLogger({ level: process.env.SBX_TEST_LOG_LEVEL ?? 'warn', name: 'vk-daemon' });
  const engine = new NodeEngine({
    dataDir: join(cfg.dataDir, 'engine'),
    // VM run dirs under the test's dir, so the test can find (and check for) every QEMU this daemon started.
    runRoot: join(cfg.dataDir, 'vms'),
    nodeName: cfg.nodeName,
    advertiseAddr: `${cfg.hostAddress}:0`,
    logger: log,
  });
  await engine.start();
  await engine.prepare({ template: 'sandbox/minimal', net: 'none', size: 'small' });
  const client = await KubeClient.fromKubeconfig(cfg.kubeconfig, { qps: -1 });
  const vk = await startVirtualNodes({
    engine,
    client,
    nodeName: cfg.nodeName,
    nodes: [{ kind: 'vk-cocoon' }],
    hostAddress: cfg.hostAddress,
    kubeletPortBase: 0,
    tls: { cert: cfg.cert, key: cfg.key, clientCa: cfg.ca },
    stateDir: join(cfg.dataDir, 'vk'),
    logger: log,
    podResyncMs: 2000,
  });
  process.stdout.write('READY\n');
  const keepAlive = setInterval(() => {}, 1 << 30);
  process.once('SIGTERM', () => {
    void (async () => {
      await vk.stop({ deleteNodes: true });
      await engine.close({ destroyVms: true });
      client.close();
      clearInterval(keepAlive);
      process.exit(0);
    })();
  });
}

const daemonEnv = process.env.VK_RESTART_DAEMON;
if (daemonEnv) {
  await daemonMain(JSON.parse(daemonEnv) as DaemonConfig);
} else {
  const { issueCert } = await import('../../src/cluster/index.js');
  const { createTestNamespace, getTestCluster } = await import('../support/cluster.js');
  const { eventually } = await import('../support/eventually.js');

  describe('virtual kubelet survives kill -9 with 5 microVM pods', { timeout: 8 * 60_000 }, () => {
    let cfg: DaemonConfig;
    let client: KubeClient;
    let ns: { name: string; cleanup(): Promise<void> };
    let kubectl: (args: string[], input?: string) => Promise<string>;
    let daemon: ChildProcess | undefined;
    const stderr: string[] = [];
    const node = `vkr-${process.pid}-vk`;
    const names = ['p1', 'p2', 'p3', 'p4', 'p5'];

    const start = async () => {
      const child = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url)], {
        env: { ...process.env, VK_RESTART_DAEMON: JSON.stringify(cfg) },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      child.stderr!.on('data', (b: Buffer) => stderr.push(b.toString()));
      await new Promise<void>((resolve, reject) => {
        let out = '';
        child.stdout!.on('data', (b: Buffer) => {
          out += b.toString();
          if (out.includes('READY')) resolve();
        });
        child.once('exit', (code) => reject(new Error(`daemon exited with ${code}: ${stderr.join('')}`)));
      });
      daemon = child;
    };
    const readyPods = () =>
      eventually(async () => (await client.list<Pod>(Pods, ns.name)).items, {
        timeoutMs: 90_000,
        what: `${names.length} pods Ready`,
        until: (pods) =>
          pods.length === names.length &&
          pods.every((p) => p.status?.conditions?.find((c) => c.type === 'Ready')?.status === 'True'),
      });

    before(async () => {
      const cluster = await getTestCluster();
      kubectl = cluster.kubectl;
      ns = await createTestNamespace('vkr');
      client = await KubeClient.fromKubeconfig(cluster.kubeconfigPath, { qps: -1 });
      const dir = mkdtempSync(join(tmpdir(), 'vkr-'));
      chmodSync(dir, 0o755);
      const serving = await issueCert(dir, cluster.pki.ca, {
        name: 'kubelet',
        commonName: node,
        ips: [cluster.hostAddress],
        usage: 'server',
      });
      cfg = {
        kubeconfig: cluster.kubeconfigPath,
        hostAddress: cluster.hostAddress,
        dataDir: dir,
        nodeName: `vkr-${process.pid}`,
        cert: serving.cert,
        key: serving.key,
        ca: cluster.pki.ca.cert,
      };
    });

    after(async () => {
      if (daemon && daemon.exitCode === null) {
        daemon.kill('SIGTERM');
        await new Promise((r) => daemon!.once('exit', r));
      }
      for (const pid of qemuPidsUnder(cfg.dataDir)) process.kill(pid, 'SIGKILL');
      client?.close();
      await ns?.cleanup();
      rmSync(cfg.dataDir, { recursive: true, force: true });
    });

    it('pods stay Ready on the same VMs across kill -9, and nothing is orphaned', async () => {
      await start();
      for (const name of names)
        await client.create<Pod>(Pods, {
          apiVersion: 'v1',
          kind: 'Pod',
          metadata: { name, namespace: ns.name },
          spec: { nodeName: node, containers: [{ name: 'main', image: 'sandbox/minimal' }] },
        });
      const before = await readyPods();
      const ids = Object.fromEntries(before.map((p) => [p.metadata.name, p.status?.containerStatuses?.[0]?.imageID]));
      const { vms: pids, spares } = qemuUnder(cfg.dataDir);
      assert.equal(pids.length, 5, 'one QEMU per pod');
      assert.ok(spares.length <= 1, `at most one spare VMM (${spares.length})`);

      daemon!.kill('SIGKILL');
      await new Promise((r) => daemon!.once('exit', r));
      assert.deepEqual(qemuUnder(cfg.dataDir).vms, pids, 'VMs outlive the daemon');
      // While the daemon is down, one pod is force-deleted: its VM is an orphan to clean up on restart.
      await client.delete(Pods, ns.name, 'p5', { gracePeriodSeconds: 0 });
      names.pop();

      await start();
      const afterPods = await readyPods();
      for (const p of afterPods)
        assert.equal(
          p.status?.containerStatuses?.[0]?.imageID,
          ids[p.metadata.name ?? ''],
          `${p.metadata.name} kept its VM`,
        );
      const left = await eventually(() => qemuUnder(cfg.dataDir).vms, {
        timeoutMs: 30_000,
        until: (l) => l.length === 4,
        what: 'the orphan VM destroyed',
      });
      for (const pid of spares) assert.equal(pidAlive(pid), false, "the dead daemon's spare VMM was reaped");
      assert.ok(
        left.every((pid) => pids.includes(pid)),
        'the same QEMU processes, no new ones',
      );
      const out = await kubectl(['-n', ns.name, 'exec', 'p1', '--', 'uname', '-r']);
      assert.match(out, /^6\.\d+\.\d+/);

      for (const name of names) await client.delete(Pods, ns.name, name);
      await eventually(() => qemuUnder(cfg.dataDir).vms, {
        timeoutMs: 60_000,
        until: (l) => l.length === 0,
        what: 'every VM destroyed with its pod',
      });
      await eventually(async () => (await client.list<Pod>(Pods, ns.name)).items.length, {
        until: (n) => n === 0,
        what: 'pods gone',
      });
    });
  });
}
