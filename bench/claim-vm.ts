/**
 * bench/claim-vm — SandboxClaim create -> claim Ready (observed by a watch) with a warm pool of REAL microVMs
 * (runtime vk-cocoon: Pods on a sandboxd virtual-kubelet node, each a QEMU clone), side by side with the same pool
 * on kwok-simulated standard nodes, in one cluster, one operator, one run. Claims alternate between the two pools,
 * serially, in rounds of 5; after each round the claims are deleted and both pools refill to fully Ready.
 *
 *   node --import tsx bench/claim-vm.ts [--samples 30] [--pool 10]
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { issueCert, readClusterEnvironment, startCluster } from '../src/cluster/index.js';
import { KubeClient, SandboxClaims, SandboxTemplates, SandboxWarmPools } from '../src/kube/index.js';
import type { ClaimObj, TemplateObj } from '../src/operator/extensions/support.js';
import { installCrds } from '../test/support/crds.js';
import { claim, OperatorProcess, percentile, pool, ReadyWaiter, waitPool, watchAll } from './claim-driver.js';

const { values } = parseArgs({
  options: { samples: { type: 'string', default: '30' }, pool: { type: 'string', default: '10' } },
});
const SAMPLES = Number(values.samples);
const POOL = Number(values.pool);
const ROOT = fileURLToPath(new URL('..', import.meta.url));

function templateFor(ns: string, runtime: 'standard' | 'vk-cocoon'): TemplateObj {
  return {
    apiVersion: 'extensions.agents.x-k8s.io/v1beta1',
    kind: 'SandboxTemplate',
    metadata: { name: 'tpl', namespace: ns },
    spec: {
      networkPolicyManagement: 'Unmanaged',
      podTemplate: {
        metadata: { annotations: { 'sandbox.cocoonstack.io/runtime': runtime } },
        spec: {
          containers: [
            { name: 'main', image: runtime === 'standard' ? 'registry.k8s.io/pause:3.10' : 'sandbox/minimal' },
          ],
        },
      },
    },
  } as TemplateObj;
}

function child(args: string[], name: string): ChildProcess {
  const c = spawn(process.execPath, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  c.stderr?.on('data', (d: Buffer) => {
    const line = d.toString();
    if (/"level":(50|60)/.test(line) || !line.startsWith('{')) process.stderr.write(`[${name}] ${line}`);
  });
  return c;
}

async function main() {
  const env = readClusterEnvironment();
  const cluster = await startCluster({
    cacheDir: env.cacheDir,
    binDir: env.binDir,
    simulatedNodes: 2,
    progress: (l) => process.stderr.write(`${l}\n`),
  });
  const dir = await mkdtemp(join(tmpdir(), 'bench-claim-vm-'));
  const procs: ChildProcess[] = [];
  const operator = new OperatorProcess(cluster.kubeconfigPath, undefined);
  const stop = new AbortController();
  try {
    await installCrds(cluster.kubectl);
    const c = await KubeClient.fromKubeconfig(cluster.kubeconfigPath, { qps: -1 });
    const tokenFile = join(dir, 'token');
    await writeFile(tokenFile, randomBytes(16).toString('hex'));
    const kubelet = await issueCert(dir, cluster.pki.ca, {
      name: 'kubelet',
      commonName: 'system:node:benchvm',
      ips: [cluster.hostAddress],
      usage: 'server',
    });
    procs.push(
      child(
        [
          join(ROOT, 'bin/sandboxd.mjs'),
          '--node-name=benchvm',
          `--listen=${cluster.hostAddress}:17790`,
          `--data-dir=${join(dir, 'node')}`,
          `--token-file=${tokenFile}`,
          `--kubeconfig=${cluster.kubeconfigPath}`,
          '--vk-nodes=vk-cocoon',
          `--kubelet-address=${cluster.hostAddress}`,
          '--kubelet-port=10290',
          `--kubelet-tls-cert=${kubelet.cert}`,
          `--kubelet-tls-key=${kubelet.key}`,
          `--kubelet-client-ca=${cluster.pki.ca.cert}`,
          `--pools=sandbox/minimal=${POOL + 2}`,
          '--max-claims=500',
          '--destroy-on-exit',
          '--log-level=warn',
        ],
        'sandboxd',
      ),
    );
    operator.start();
    const lanes = [
      { ns: 'sim', runtime: 'standard' as const, lat: [] as number[], waiter: new ReadyWaiter() },
      { ns: 'vm', runtime: 'vk-cocoon' as const, lat: [] as number[], waiter: new ReadyWaiter() },
    ];
    for (const l of lanes) {
      await cluster.kubectl(['create', 'namespace', l.ns]);
      await c.create(SandboxTemplates, templateFor(l.ns, l.runtime));
      await c.create(SandboxWarmPools, pool(l.ns, 'pool', 'tpl', POOL));
      const list = await c.list<ClaimObj>(SandboxClaims, l.ns);
      void watchAll<ClaimObj>(
        c,
        SandboxClaims,
        l.ns,
        list.metadata.resourceVersion ?? '0',
        l.waiter.onEvent,
        stop.signal,
      );
    }
    const fill = async () => {
      for (const l of lanes)
        await waitPool(c, l.ns, 'pool', POOL, 600_000, (s) => process.stderr.write(`[${l.ns}] ${s}\n`));
    };
    await fill();
    let n = 0;
    while (lanes.some((l) => l.lat.length < SAMPLES)) {
      const made: Array<{ ns: string; name: string }> = [];
      for (let i = 0; i < 5; i++) {
        for (const l of lanes) {
          if (l.lat.length >= SAMPLES) continue;
          const name = `c${n++}`;
          const t0 = performance.now();
          await c.create(SandboxClaims, claim(l.ns, name, 'pool'));
          const t1 = await l.waiter.wait(name, 60_000);
          if (t1 === undefined) throw new Error(`claim ${l.ns}/${name} not Ready within 60 s`);
          l.lat.push(t1 - t0);
          made.push({ ns: l.ns, name });
        }
      }
      for (const m of made) await c.delete(SandboxClaims, m.ns, m.name);
      await sleep(500);
      await fill();
    }
    const fmt = (xs: number[]) => {
      const s = [...xs].sort((a, b) => a - b);
      return { p50: percentile(s, 50), p95: percentile(s, 95), p99: percentile(s, 99) };
    };
    const sim = fmt(lanes[0]!.lat);
    const vm = fmt(lanes[1]!.lat);
    console.log(`etcd fsync: on; pool ${POOL} per lane; ${SAMPLES} serial claims per lane, interleaved`);
    console.log(
      `standard (kwok-simulated nodes): p50 ${sim.p50.toFixed(1)} ms  p95 ${sim.p95.toFixed(1)} ms  p99 ${sim.p99.toFixed(1)} ms`,
    );
    console.log(
      `vk-cocoon (real QEMU microVMs):   p50 ${vm.p50.toFixed(1)} ms  p95 ${vm.p95.toFixed(1)} ms  p99 ${vm.p99.toFixed(1)} ms`,
    );
    console.log(
      `ratio vk-cocoon / simulated: p50 ${(vm.p50 / sim.p50).toFixed(2)}x  p95 ${(vm.p95 / sim.p95).toFixed(2)}x`,
    );
    c.close();
  } finally {
    stop.abort();
    await operator.kill('SIGTERM');
    for (const p of procs.reverse()) {
      p.kill('SIGTERM');
      await new Promise((r) => (p.exitCode !== null ? r(null) : p.once('exit', r)));
    }
    await cluster.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
