/**
 * bench/claim: SandboxClaim create -> claim Ready observed by a watch, on a real control plane with kwok-simulated
 * nodes, the operator running as a child process (default flags except --kube-api-qps=-1, no leader election).
 *
 *   node --import tsx bench/claim.ts [--fsync true|false] [--samples 60] [--only pool10,pool200,pool2000,c5,c20]
 *   node --import tsx bench/claim.ts --only floor     # the idle cluster's floors alone
 *
 * Configurations: pool 10 / 200 / 2 000 at concurrency 1, and concurrency 5 and 20 at pool 200. Claims run in rounds
 * (at most half the pool, and 5 at concurrency 1, so every configuration sees the same background load); after each
 * round the claims are deleted and the pool is left to refill to fully Ready, so the pool size is the only variable.
 * Reported per configuration: p50/p95/p99 latency, warm-hit ratio, apiserver requests per claim (from the
 * apiserver's `apiserver_request_total`, everything the control plane served during the rounds: client, operator,
 * GC, scheduler, kwok) and the operator's own requests per claim (`rest_client_requests_total`); and, measured in the
 * same cluster just before, the p50 of one write observed through a watch and of the three-write chain a warm claim
 * is (chainFloor). The same floors are measured once on the idle cluster first. Also per configuration: the share of
 * all cores busy while the claims ran, and the operator's own CPU per claim.
 */
import { randomInt } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { parseArgs } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import { readClusterEnvironment, startCluster } from '../src/cluster/index.js';
import { ConfigMaps, KubeClient, SandboxClaims, SandboxWarmPools, type KubeObject } from '../src/kube/index.js';
import type { ClaimObj, PoolObj } from '../src/operator/extensions/support.js';
import { installCrds } from '../test/support/crds.js';
import { claim, OperatorProcess, percentile, ReadyWaiter, setupPool, watchAll } from './claim-driver.js';
import { machineIdleSettings } from './machine.js';

interface Config {
  id: string;
  pool: number;
  concurrency: number;
}

const CONFIGS: Config[] = [
  { id: 'pool10', pool: 10, concurrency: 1 },
  { id: 'pool200', pool: 200, concurrency: 1 },
  { id: 'c5', pool: 200, concurrency: 5 },
  { id: 'c20', pool: 200, concurrency: 20 },
  { id: 'pool2000', pool: 2000, concurrency: 1 },
];

function sumMetric(text: string, name: string, filter?: (labels: string) => boolean): number {
  let total = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    const i = line.lastIndexOf(' ');
    const labels = line.slice(name.length, i);
    if (filter && !filter(labels)) continue;
    total += Number(line.slice(i + 1));
  }
  return total;
}

async function waitPoolFull(c: KubeClient, ns: string, n: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const p = await c.get<PoolObj>(SandboxWarmPools, ns, 'pool');
    if ((p.status?.readyReplicas ?? 0) === n && (p.status?.replicas ?? 0) === n) return;
    if (Date.now() > deadline)
      throw new Error(`pool in ${ns}: ${p.status?.readyReplicas}/${n} ready after ${timeoutMs} ms`);
    await sleep(200);
  }
}

/**
 * The floor on this machine at this moment: one write (ConfigMap create) observed through a watch, serial. A warm
 * claim is three writes and two watch deliveries, so this puts its latency in context.
 */
async function writeFloor(c: KubeClient, ns: string, n = 30): Promise<number> {
  const start = await c.list(ConfigMaps, ns, { limit: 1 });
  return timeCreates(c, ns, 'floor-', n, start.metadata.resourceVersion!, () => true);
}

/**
 * p50 of: create ConfigMap `<prefix><i>`, serially, until this client's watch (from `fromRv`) shows it `done`.
 */
async function timeCreates(
  c: KubeClient,
  ns: string,
  prefix: string,
  n: number,
  fromRv: string,
  done: (o: KubeObject & { data?: Record<string, string> }) => boolean,
): Promise<number> {
  const seen = new Map<string, (t: number) => void>();
  const stop = new AbortController();
  const watching = watchAll<KubeObject & { data?: Record<string, string> }>(
    c,
    ConfigMaps,
    ns,
    fromRv,
    (_t, o) => {
      if (done(o)) seen.get(o.metadata.name!)?.(performance.now());
    },
    stop.signal,
  );
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const name = `${prefix}${i}`;
    const got = new Promise<number>((r) => seen.set(name, r));
    const t = performance.now();
    await c.create(ConfigMaps, { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name, namespace: ns } });
    out.push((await got) - t);
  }
  stop.abort();
  await watching;
  return percentile(
    out.sort((a, b) => a - b),
    50,
  );
}

/** Busy CPU time of the whole machine so far, in ms (/proc/stat; USER_HZ = 100). */
function machineBusyMs(): number {
  const f = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
  const [user, nice, system, _idle, _iowait, irq, softirq, steal] = f;
  return (user! + nice! + system! + irq! + softirq! + (steal ?? 0)) * 10;
}

/**
 * The floor of a warm claim's write chain without the operator: the bench client creates a ConfigMap ("claim"); a
 * second client (its own connection, like the operator) sees it through a watch, merge-patches another ConfigMap
 * guarded by its resourceVersion ("adoption"), then patches the first ("status"); the bench client's watch sees
 * that. Three serial writes and two watch deliveries on the cheapest kind there is: what no claim can beat here.
 */
async function chainFloor(c: KubeClient, reactor: KubeClient, ns: string, n = 40): Promise<number> {
  const stop = new AbortController();
  const reactions = new Set<Promise<void>>();
  let peer = await reactor.create<KubeObject>(ConfigMaps, {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: { name: 'chain-peer', namespace: ns },
  });
  const start = await c.list(ConfigMaps, ns, { limit: 1 });
  const rv = start.metadata.resourceVersion!;
  const reacting = watchAll<KubeObject>(
    reactor,
    ConfigMaps,
    ns,
    rv,
    (type, o) => {
      const name = o.metadata.name!;
      if (type !== 'ADDED' || !name.startsWith('chain-c-')) return;
      const reaction = (async () => {
        peer = await reactor.patch<KubeObject>(
          ConfigMaps,
          ns,
          'chain-peer',
          { metadata: { resourceVersion: peer.metadata.resourceVersion, labels: { owner: name } } },
          'merge',
        );
        await reactor.patch(ConfigMaps, ns, name, { data: { ready: 'true' } }, 'merge');
      })()
        .catch((err: unknown) => void process.stderr.write(`chain floor: ${String(err)}\n`))
        .finally(() => reactions.delete(reaction));
      reactions.add(reaction);
    },
    stop.signal,
  );
  try {
    return await timeCreates(c, ns, 'chain-c-', n, rv, (o) => o.data?.ready === 'true');
  } finally {
    stop.abort();
    // The client can see the status patch before the reactor has its response: let that response arrive.
    await Promise.all([reacting, ...reactions]);
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      fsync: { type: 'string', default: 'true' },
      samples: { type: 'string', default: '60' },
      only: { type: 'string' },
    },
  });
  const fsync = values.fsync !== 'false';
  const samples = Number(values.samples);
  const only = values.only ? new Set(values.only.split(',')) : undefined;
  const log = (l: string) => process.stderr.write(`${l}\n`);
  const env = readClusterEnvironment();
  const cluster = await startCluster({
    cacheDir: env.cacheDir,
    binDir: env.binDir,
    simulatedNodes: 2,
    etcdFsync: fsync,
    progress: log,
  });
  const metricsPort = 20000 + randomInt(20000);
  const op = new OperatorProcess(cluster.kubeconfigPath, '', [`--metrics-bind-address=127.0.0.1:${metricsPort}`]);
  const results: Array<Record<string, unknown>> = [];
  let idleFloor: Record<string, number> | undefined;
  const interrupted = new Promise<never>((_, reject) => {
    for (const sig of ['SIGINT', 'SIGTERM'] as const)
      process.once(sig, () => reject(new Error(`interrupted by ${sig}`)));
  });
  interrupted.catch(() => {});
  try {
    await installCrds(cluster.kubectl);
    const c = await KubeClient.fromKubeconfig(cluster.kubeconfigPath, { qps: -1 });
    const reactor = await KubeClient.fromKubeconfig(cluster.kubeconfigPath, { qps: -1 });
    op.start();
    const opMetrics = async () => {
      for (let i = 0; i < 50; i++) {
        try {
          const res = await fetch(`http://127.0.0.1:${metricsPort}/metrics`);
          return await res.text();
        } catch {
          await sleep(200);
        }
      }
      throw new Error('operator metrics unreachable');
    };
    // The idle cluster's floors first (operator running, no pool): what any claim here is measured against.
    await cluster.kubectl(['create', 'namespace', 'bench-floor']);
    await sleep(10_000);
    const idleWrite = await writeFloor(c, 'bench-floor');
    const idleChain = await chainFloor(c, reactor, 'bench-floor');
    idleFloor = {
      writeWatchP50: +idleWrite.toFixed(2),
      threeWriteChainP50: +idleChain.toFixed(2),
      loadAverage1m: +loadavg()[0]!.toFixed(1),
    };
    log(`machine: ${machineIdleSettings()}`);
    log(`idle cluster floor: ${JSON.stringify(idleFloor)}`);
    for (const cfg of CONFIGS) {
      if (only && !only.has(cfg.id)) continue;
      const ns = `bench-${cfg.id}`;
      await cluster.kubectl(['create', 'namespace', ns]);
      const t0 = Date.now();
      await setupPool(c, ns, cfg.pool);
      await Promise.race([waitPoolFull(c, ns, cfg.pool, 900_000), interrupted]);
      log(`${cfg.id}: pool of ${cfg.pool} Ready in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
      const floor = await writeFloor(c, ns);
      const chain = await chainFloor(c, reactor, ns);
      log(`${cfg.id}: floor p50 ${floor.toFixed(2)} ms (one write + watch), ${chain.toFixed(2)} ms (3-write chain)`);
      const waiter = new ReadyWaiter();
      const stop = new AbortController();
      const start = await c.list<ClaimObj>(SandboxClaims, ns, { limit: 1 });
      const watching = watchAll<ClaimObj>(
        c,
        SandboxClaims,
        ns,
        start.metadata.resourceVersion!,
        waiter.onEvent,
        stop.signal,
      );
      const round = cfg.concurrency === 1 ? 5 : Math.min(100, Math.floor(cfg.pool / 2));
      const latencies: number[] = [];
      let warm = 0;
      let seq = 0;
      let apiRequests = 0;
      let opRequests = 0;
      let busyMs = 0;
      let wallMs = 0;
      let opCpuMs = 0;
      const runRound = async (n: number, measure: boolean) => {
        const busy0 = machineBusyMs();
        const wall0 = performance.now();
        const opCpu0 = op.cpuMs();
        const names: string[] = [];
        const before = measure ? [await c.raw('GET', '/metrics'), await opMetrics()] : undefined;
        let next = 0;
        await Promise.all(
          Array.from({ length: cfg.concurrency }, async () => {
            for (;;) {
              if (next >= n) return;
              next++;
              const name = `c-${seq++}`;
              names.push(name);
              const t = performance.now();
              await c.create(SandboxClaims, claim(ns, name, 'pool'));
              const at = await waiter.wait(name, 60_000);
              if (at === undefined) throw new Error(`claim ${name} not Ready within 60 s`);
              if (measure) latencies.push(at - t);
            }
          }),
        );
        if (measure) {
          busyMs += machineBusyMs() - busy0;
          wallMs += performance.now() - wall0;
          opCpuMs += op.cpuMs() - opCpu0;
        }
        if (before) {
          const [api, opm] = [await c.raw('GET', '/metrics'), await opMetrics()];
          apiRequests += sumMetric(api, 'apiserver_request_total') - sumMetric(before[0]!, 'apiserver_request_total');
          opRequests +=
            sumMetric(opm, 'rest_client_requests_total', (l) => !l.includes('verb="watch"')) -
            sumMetric(before[1]!, 'rest_client_requests_total', (l) => !l.includes('verb="watch"'));
          const claims = (await c.list<ClaimObj>(SandboxClaims, ns)).items.filter((x) =>
            names.includes(x.metadata.name!),
          );
          warm += claims.filter((x) => x.status?.sandbox?.name && x.status.sandbox.name !== x.metadata.name).length;
        }
        await Promise.all(names.map((n) => c.delete(SandboxClaims, ns, n).catch(() => {})));
        await waitPoolFull(c, ns, cfg.pool, 300_000);
      };
      await runRound(Math.min(round, 5), false); // warm-up
      while (latencies.length < samples)
        await Promise.race([runRound(Math.min(round, samples - latencies.length), true), interrupted]);
      stop.abort();
      await watching;
      const sorted = [...latencies].sort((a, b) => a - b);
      const r = {
        config: cfg.id,
        pool: cfg.pool,
        concurrency: cfg.concurrency,
        samples: sorted.length,
        p50: +percentile(sorted, 50).toFixed(2),
        p95: +percentile(sorted, 95).toFixed(2),
        p99: +percentile(sorted, 99).toFixed(2),
        warmHitRatio: +(warm / sorted.length).toFixed(3),
        apiserverRequestsPerClaim: +(apiRequests / sorted.length).toFixed(1),
        operatorRequestsPerClaim: +(opRequests / sorted.length).toFixed(1),
        // Share of all cores busy while the claims ran (whatever was busy: control plane, kwok, operator, client).
        machineBusyWhileClaiming: +(busyMs / (wallMs * cpus().length)).toFixed(2),
        // The operator's own CPU while the claims ran, per claim (its share of the above).
        operatorCpuMsPerClaim: +(opCpuMs / sorted.length).toFixed(1),
        writeWatchFloorP50: +floor.toFixed(2),
        threeWriteChainFloorP50: +chain.toFixed(2),
        loadAverage1m: +loadavg()[0]!.toFixed(1),
        etcdFsync: fsync,
      };
      log(JSON.stringify(r));
      results.push(r);
      await cluster
        .kubectl(['delete', 'namespace', ns, '--wait=true', '--timeout=300s'])
        .catch((err: unknown) => log(String(err)));
    }
    c.close();
    reactor.close();
  } finally {
    await op.kill('SIGTERM');
    await cluster.stop();
  }
  process.stdout.write(
    `${JSON.stringify({ etcdFsync: fsync, machine: machineIdleSettings(), samplesPerConfig: samples, idleFloor, results }, null, 2)}\n`,
  );
}

await main();
