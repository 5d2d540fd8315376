/**
 * bench/apiserver — the aggregated layout's create, side by side with the CRD layout's warm claim and the
 * aggregator's own floor, in one run on this machine:
 *
 *   node --import tsx bench/apiserver.ts [--samples 40] [--rounds 3] [--list 10000]
 *
 * - L3 create: `POST .../sandboxes` through kube-apiserver → sandbox-apiserver → a node-local claim on a real
 *   sandboxd node (real QEMU microVMs, template sandbox/minimal, warm pools), timed to the 201 response, which
 *   carries Ready=True; each sandbox is deleted afterwards (not timed).
 * - L1 claim: SandboxClaim create → Ready observed by a watch, on a second control plane in the CRD layout (the
 *   operator as a child process, a warm pool on kwok-simulated nodes): the same measurement bench/claim makes.
 * - Aggregator floor: `GET /apis/agents.x-k8s.io/v1beta1` through kube-apiserver (discovery, served by
 *   sandbox-apiserver, no work behind it): what any aggregated request costs before our storage does anything.
 * Serial and at concurrency 20, interleaved in rounds so both layouts see the same machine. Then the read path at
 * fleet size: a SIMULATED node (bench/support/simulated-node.ts, no VMs) reports `--list` sandboxes, and the first
 * page of `kubectl get sandboxes -A` (limit 500) and a Get by name are timed through kube-apiserver.
 * Targets (issue "sandbox-apiserver"): L3 p50 ≤ 0.25× L1 p50 and ≤ 2× the floor; the first page ≤ 100 ms.
 */
import { readFile } from 'node:fs/promises';
import { request as httpsRequest } from 'node:https';
import { parseArgs } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import { readClusterEnvironment, startCluster } from '../src/cluster/index.js';
import { startPlatform } from '../src/cli/platform.js';
import { KubeClient, SandboxClaims, Sandboxes, Namespaces, type KubeObject } from '../src/kube/index.js';
import { createLogger } from '../src/log/logger.js';
import type { ClaimObj } from '../src/operator/extensions/support.js';
import { installCrds } from '../test/support/crds.js';
import { claim, OperatorProcess, percentile, ReadyWaiter, setupPool, waitPool, watchAll } from './claim-driver.js';
import { sumWhere } from './support/apiserver-metrics.js';
import { startSimulatedNode } from './support/simulated-node.js';
import { timed } from './support/timed.js';

const { values } = parseArgs({
  options: {
    samples: { type: 'string', default: '40' },
    rounds: { type: 'string', default: '3' },
    list: { type: 'string', default: '10000' },
    warm: { type: 'string', default: '24' },
  },
});
const SAMPLES = Number(values.samples);
const ROUNDS = Number(values.rounds);
const LIST = Number(values.list);
const WARM = Number(values.warm);
const say = (s: string) => process.stderr.write(`[bench/apiserver] ${s}\n`);

interface Stats {
  p50: number;
  p95: number;
  p99: number;
  n: number;
}
const stats = (xs: number[]): Stats => {
  const s = [...xs].sort((a, b) => a - b);
  return { p50: percentile(s, 50), p95: percentile(s, 95), p99: percentile(s, 99), n: s.length };
};
const fmt = (s: Stats) => `p50 ${s.p50.toFixed(2)}  p95 ${s.p95.toFixed(2)}  p99 ${s.p99.toFixed(2)} ms (n=${s.n})`;

function sandbox(name: string): KubeObject & { spec: unknown } {
  return {
    apiVersion: 'agents.x-k8s.io/v1beta1',
    kind: 'Sandbox',
    metadata: { name, namespace: 'bench' },
    spec: { podTemplate: { spec: { containers: [{ name: 'main', image: 'sandbox/minimal' }] } } },
  };
}

/** sandbox-apiserver's own create time so far (its apiserver_request_duration_seconds), read with the admin cert. */
async function serverCreateTime(p: Awaited<ReturnType<typeof startPlatform>>): Promise<{ sum: number; count: number }> {
  const [ca, cert, key] = await Promise.all([
    readFile(p.apiserver!.caFile),
    readFile(p.cluster.pki.admin.cert),
    readFile(p.cluster.pki.admin.key),
  ]);
  const text = await new Promise<string>((resolve, reject) => {
    const req = httpsRequest(`https://${p.apiserver!.address}/metrics`, { ca, cert, key }, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve(body));
    });
    req.on('error', reject);
    req.end();
  });
  const val = (suffix: string) =>
    sumWhere(text, `apiserver_request_duration_seconds_${suffix}`, { verb: 'create', resource: 'sandboxes' });
  return { sum: val('sum'), count: val('count') };
}

async function main(): Promise<void> {
  const env = readClusterEnvironment();
  const logger = createLogger({ level: 'warn', name: 'bench' });
  say('starting the aggregated layout (2 sandboxd nodes, real microVMs)');
  const agg = await startPlatform({
    cacheDir: env.cacheDir,
    binDir: env.binDir,
    dataDir: `/tmp/sbx-bench-apiserver-${process.pid}`,
    layout: 'aggregated',
    simulatedNodes: 0,
    sandboxdNodes: 2,
    warm: WARM,
    template: 'sandbox/minimal',
    // Refill only between bursts (as the L1 side: its pool is refilled between bursts too), so a measured create
    // does not share the two cores with the clones its predecessors triggered.
    sandboxdArgs: ['--refill-delay=2000'],
    etcdFsync: true,
    logger,
    progress: say,
  });
  say('starting the CRD layout (operator, kwok-simulated nodes)');
  const crd = await startCluster({
    cacheDir: env.cacheDir,
    binDir: env.binDir,
    simulatedNodes: 2,
    etcdFsync: true,
    progress: say,
  });
  const operator = new OperatorProcess(crd.kubeconfigPath, 'bench');
  const stop = new AbortController();
  let simulated: Awaited<ReturnType<typeof startSimulatedNode>> | undefined;
  try {
    await installCrds(crd.kubectl);
    const a = await KubeClient.fromKubeconfig(agg.cluster.kubeconfigPath, { qps: -1 });
    const c = await KubeClient.fromKubeconfig(crd.kubeconfigPath, { qps: -1 });
    await a.create(Namespaces, { metadata: { name: 'bench' } });
    await c.create(Namespaces, { metadata: { name: 'bench' } });
    operator.start();
    await setupPool(c, 'bench', 60);
    await waitPool(c, 'bench', 'pool', 60, 180_000, say);
    const waiter = new ReadyWaiter();
    void watchAll<ClaimObj>(c, SandboxClaims, 'bench', '0', waiter.onEvent, stop.signal);
    await sleep(1000);

    let seq = 0;
    const created: string[] = [];
    const claimed: string[] = [];
    const nodes = await Promise.all(
      agg.sandboxd.map(async (n) => ({ ...n, token: (await readFile(n.tokenFile, 'utf8')).trim() })),
    );
    /** Delete what a burst made (untimed) and wait until both layouts' pools are full again. */
    const settle = async () => {
      await Promise.all(created.splice(0).map((n) => a.delete(Sandboxes, 'bench', n)));
      await Promise.all(claimed.splice(0).map((n) => c.delete(SandboxClaims, 'bench', n)));
      for (const n of nodes)
        for (let i = 0; ; i++) {
          const info = (await (
            await fetch(`http://${n.address}/v1/info`, { headers: { authorization: `Bearer ${n.token}` } })
          ).json()) as {
            pools: Array<{ warm: number; primed: number; target: number }>;
          };
          if (info.pools.every((p) => p.warm >= p.target && p.primed >= p.target)) break;
          if (i > 600) throw new Error(`node ${n.node} pools not refilled in 5 min`);
          await sleep(500);
        }
      await waitPool(c, 'bench', 'pool', 60, 180_000);
    };
    const l3 = async () => {
      const name = `l3-${seq++}`;
      for (let attempt = 0; ; attempt++) {
        try {
          const t0 = performance.now();
          const obj = await a.create(Sandboxes, sandbox(name) as never);
          const ms = performance.now() - t0;
          const ready = (
            obj as { status?: { conditions?: Array<{ type: string; status: string }> } }
          ).status?.conditions?.find((x) => x.type === 'Ready');
          if (ready?.status !== 'True') throw new Error(`${name}: create answered without Ready=True`);
          created.push(name);
          return ms;
        } catch (err) {
          // No warm VM left this instant (503): the pools refill; capacity is not what this measures.
          if (!/no warm sandbox/.test(String(err)) || attempt > 200) throw err;
          await sleep(50);
        }
      }
    };
    const l1 = async () => {
      const name = `l1-${seq++}`;
      const t0 = performance.now();
      await c.create(SandboxClaims, claim('bench', name, 'pool'));
      const at = await waiter.wait(name, 30_000);
      if (at === undefined) throw new Error(`${name}: not Ready within 30 s`);
      claimed.push(name);
      return at - t0;
    };
    const floor = async () => {
      const t0 = performance.now();
      await a.raw('GET', '/apis/agents.x-k8s.io/v1beta1');
      return performance.now() - t0;
    };
    for (let i = 0; i < 20; i++) await floor(); // warm connections and caches on every path
    for (let i = 0; i < 5; i++) await l3();
    for (let i = 0; i < 5; i++) await l1();

    const series: Record<string, number[]> = { floor: [], l3: [], l1: [], l3c20: [], l1c20: [] };
    const timedMs = async (n: number, conc: number, f: () => Promise<number>) => {
      const out: number[] = [];
      await timed(n, conc, async () => {
        out.push(await f());
      });
      return out;
    };
    await settle();
    const serverBefore = await serverCreateTime(agg);
    for (let r = 0; r < ROUNDS; r++) {
      say(`round ${r + 1}/${ROUNDS}`);
      series.floor!.push(...(await timedMs(SAMPLES, 1, floor)));
      series.l3!.push(...(await timedMs(SAMPLES, 1, l3)));
      series.l1!.push(...(await timedMs(SAMPLES, 1, l1)));
      await settle();
      series.l3c20!.push(...(await timedMs(20, 20, l3)));
      series.l1c20!.push(...(await timedMs(20, 20, l1)));
      await settle();
    }
    const serverAfter = await serverCreateTime(agg);
    const serverMeanMs = ((serverAfter.sum - serverBefore.sum) / (serverAfter.count - serverBefore.count)) * 1000;

    say(`read path: a simulated node with ${LIST} sandboxes`);
    simulated = await startSimulatedNode({
      client: a,
      host: agg.cluster.hostAddress,
      name: 'sim-node-0',
      namespace: 'bench',
      sandboxes: LIST,
    });
    const deadline = Date.now() + 60_000;
    for (;;) {
      const page = await a.list(Sandboxes, 'bench', {
        limit: 1,
        labelSelector: 'sandbox.cocoonstack.io/simulated=true',
        continue: undefined,
      });
      if (page.items.length && page.metadata.continue) {
        const all = await a.list(Sandboxes, 'bench', { labelSelector: 'sandbox.cocoonstack.io/simulated=true' });
        if (all.items.length >= LIST) break;
      }
      if (Date.now() > deadline) throw new Error('the simulated node never showed up in lists');
      await sleep(500);
    }
    const firstPage = await timedMs(20, 1, async () => {
      const t0 = performance.now();
      const page = await a.raw('GET', '/apis/agents.x-k8s.io/v1beta1/sandboxes?limit=500');
      if (!page.includes('"continue"')) throw new Error('no continue token on a 500-item page');
      return performance.now() - t0;
    });
    const fullList = await timedMs(3, 1, async () => {
      const t0 = performance.now();
      await a.raw('GET', '/apis/agents.x-k8s.io/v1beta1/namespaces/bench/sandboxes');
      return performance.now() - t0;
    });
    const getByName = await timedMs(50, 1, async () => {
      const t0 = performance.now();
      await a.get(Sandboxes, 'bench', `sim-${String(Math.floor(Math.random() * LIST)).padStart(6, '0')}`);
      return performance.now() - t0;
    });

    const s = Object.fromEntries(Object.entries(series).map(([k, v]) => [k, stats(v)])) as Record<string, Stats>;
    const fp = stats(firstPage);
    const out = [
      '',
      `bench/apiserver — ${new Date().toISOString()}, etcd fsync on, ${ROUNDS} rounds x ${SAMPLES} serial + 20 concurrent`,
      `aggregator floor (GET discovery via kube-apiserver)   ${fmt(s.floor!)}`,
      `L3 create -> 201 Ready (aggregated, real microVMs)    ${fmt(s.l3!)}`,
      `L1 claim -> Ready by watch (CRD layout, kwok nodes)   ${fmt(s.l1!)}`,
      `  of which inside sandbox-apiserver (mean, its own histogram): ${serverMeanMs.toFixed(2)} ms`,
      `L3 create at concurrency 20                          ${fmt(s.l3c20!)}`,
      `L1 claim at concurrency 20                           ${fmt(s.l1c20!)}`,
      `first page of a list over ${LIST} (simulated) sandboxes, limit 500   ${fmt(fp)}`,
      `whole list of ${LIST} (simulated) sandboxes                          ${fmt(stats(fullList))}`,
      `Get by name among ${LIST + 0} sandboxes                              ${fmt(stats(getByName))}`,
      '',
      'target                                   measured ratio   target   verdict',
      `L3 p50 / L1 p50                          ${(s.l3!.p50 / s.l1!.p50).toFixed(2)}x          0.25x    ${s.l3!.p50 <= 0.25 * s.l1!.p50 ? 'pass' : 'miss'}`,
      `L3 p50 / aggregator floor p50            ${(s.l3!.p50 / s.floor!.p50).toFixed(2)}x          2x       ${s.l3!.p50 <= 2 * s.floor!.p50 ? 'pass' : 'miss'}`,
      `first page p50                           ${fp.p50.toFixed(1)} ms        100 ms   ${fp.p50 <= 100 ? 'pass' : 'miss'}`,
      'memory per Get vs fleet size: node --expose-gc --max-semi-space-size=256 --import tsx bench/apiserver-get-memory.ts',
    ];
    process.stdout.write(`${out.join('\n')}\n`);
  } finally {
    stop.abort();
    await simulated?.close().catch(() => undefined);
    await operator.kill('SIGTERM');
    await crd.stop();
    await agg.stop();
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    process.stderr.write(`bench/apiserver failed: ${(err as Error).stack ?? String(err)}\n`);
    process.exit(1);
  },
);
