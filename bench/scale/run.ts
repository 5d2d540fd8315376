/**
 * bench/scale — fleet scale, SIMULATED below the VMM: one patch of a SandboxWarmPool from 0 to S warm sandboxes
 * over N sandboxd node daemons, with everything above the VMM real and at full count.
 *
 *   flock /tmp/sbx-heavy.lock node --import tsx bench/scale/run.ts [--quick] [--sandboxes 50000] [--nodes 20]
 *       [--refill-concurrency 16] [--clone-ms <sim default>] [--publish-interval 5]
 *
 * It starts the control plane (etcd fsync on), sandbox-apiserver and N real sandboxd processes with `--engine=sim`
 * (src/vmm/sim-driver.ts: each VM is a record, a clone takes the real engine's measured clone time; every node says
 * it is simulated in its logs, /v1/info, metrics and NodeInventory), each with its own HTTP API, change feed and
 * NodeInventory publisher. Then:
 *   1. fills: the pool patched 0 → S/4, S/2 and S (drained between), each timed to full supply by node telemetry
 *      (the sum of every node's `sandboxd_pool_warm`, polled every 100 ms) and by the pool's `status.readyReplicas`;
 *      etcd's own write counters sampled every second; T ≈ T₀ + S/(N·r) fitted to the three;
 *   2. the fleet at S/10 and at S sandboxes (created through sandbox-apiserver's own create, straight to its port
 *      with the admin certificate, from the warm pool, which refills behind them): the first page of
 *      `kubectl get sandboxes -A --chunk-size=500` and the whole command, a Get by name, a watch's initial sync
 *      (WatchList), heap per Get (bench/scale/get-heap.ts: the server's store fed by the same feeds), and claims
 *      (create → 201 Ready through kube-apiserver, serial and 20 at a time);
 *   3. etcd's objects at the end against the start, NodeInventory sizes, the RSS of every process.
 * Targets (issue 22) are printed with their measured ratios.
 */
import { execFile, spawn } from 'node:child_process';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { startPlatform, type Platform } from '../../src/cli/platform.js';
import { readClusterEnvironment } from '../../src/cluster/index.js';
import { createLogger } from '../../src/log/logger.js';
import { SIM_CLONE_MS } from '../../src/vmm/index.js';
import { machineIdleSettings } from '../machine.js';
import { timed } from '../support/timed.js';
import {
  adminHttps,
  etcdKeys,
  etcdWrites,
  fitLine,
  keyKind,
  nodeRefs,
  pct,
  platformRss,
  REQUEST_TIMEOUT_MS,
  RequestTimeout,
  claimTimeInServers,
  warmOnNodes,
  type Https,
  type NodeRef,
} from '../support/scale-probes.js';

const { values } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    sandboxes: { type: 'string' },
    nodes: { type: 'string', default: '20' },
    'refill-concurrency': { type: 'string', default: '16' },
    'clone-ms': { type: 'string', default: String(SIM_CLONE_MS) },
    'publish-interval': { type: 'string', default: '5' },
    claims: { type: 'string', default: '100' },
  },
});
const S = Number(values.sandboxes ?? (values.quick ? 5000 : 50_000));
const N = Number(values.nodes);
const CONC = Number(values['refill-concurrency']);
const CLONE_MS = Number(values['clone-ms']);
const PUBLISH_S = Number(values['publish-interval']);
const CLAIMS = Number(values.claims);
const NS = 'scale';
const POOL_PATH = `/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/${NS}/sandboxwarmpools/pool`;
const SANDBOXES = `/apis/agents.x-k8s.io/v1beta1`;
const TABLE =
  'application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json';
const say = (s: string) => process.stderr.write(`[bench/scale ${new Date().toISOString().slice(11, 19)}] ${s}\n`);
const ms = (x: number) => `${x.toFixed(1)} ms`;
const HERE = fileURLToPath(new URL('.', import.meta.url));

interface Fill {
  size: number;
  nodesMs: number;
  statusMs: number;
  /** etcd writes (puts + deletes) per second, sampled every second from the patch on. */
  writes: Array<{ t: number; total: number }>;
}

async function readyReplicas(kube: Https): Promise<number> {
  const r = await kube.get(POOL_PATH);
  return (JSON.parse(r.body) as { status?: { readyReplicas?: number } }).status?.readyReplicas ?? 0;
}

/** Patch the pool to `size` and time full supply by node telemetry and by status.readyReplicas. */
async function fill(p: Platform, kube: Https, nodes: NodeRef[], size: number): Promise<Fill> {
  const writes: Fill['writes'] = [];
  const w0 = (await etcdWrites(p.cluster.netns)).total;
  const t0 = performance.now();
  const patched = await kube.mergePatch(POOL_PATH, { spec: { replicas: size } });
  if (patched.status !== 200) throw new Error(`patch: HTTP ${patched.status}: ${patched.body}`);
  let nodesMs = NaN;
  let statusMs = NaN;
  let stop = false;
  const sampler = (async () => {
    for (let i = 1; !stop; i++) {
      await sleep(Math.max(0, t0 + i * 1000 - performance.now()));
      writes.push({ t: (performance.now() - t0) / 1000, total: (await etcdWrites(p.cluster.netns)).total - w0 });
    }
  })();
  // 10× the simulated ceiling (nodes × concurrency / clone time): on 2 cores the daemons may be CPU-bound well below it.
  const deadline = t0 + Math.max(300_000, (size / (N * (CONC / (CLONE_MS / 1000)))) * 10_000);
  while (Number.isNaN(nodesMs) || Number.isNaN(statusMs)) {
    const [warm, ready] = await Promise.all([warmOnNodes(nodes), readyReplicas(kube)]);
    const now = performance.now() - t0;
    if (Number.isNaN(nodesMs) && warm >= size) nodesMs = now;
    if (Number.isNaN(statusMs) && ready >= size) statusMs = now;
    if (performance.now() > deadline)
      throw new Error(`fill to ${size}: ${warm} warm, readyReplicas ${ready} after ${now} ms`);
    await sleep(100);
  }
  // At least 3 publish intervals of etcd samples, so the rate over any common window can be read.
  while (performance.now() - t0 < Math.max(nodesMs, statusMs) + 1000) await sleep(100);
  stop = true;
  await sampler;
  return { size, nodesMs, statusMs, writes };
}

async function drain(kube: Https, nodes: NodeRef[]): Promise<void> {
  await kube.mergePatch(POOL_PATH, { spec: { replicas: 0 } });
  for (let i = 0; (await warmOnNodes(nodes)) > 0 || (await readyReplicas(kube)) > 0; i++) {
    if (i > 1200) throw new Error('the pool did not drain in 2 min');
    await sleep(100);
  }
}

/** etcd writes/s over the window [from, to] s after the patch (samples are whole seconds). */
function rate(f: Fill, from: number, to: number): number {
  const at = (t: number) => f.writes.find((w) => w.t >= t - 0.05)?.total ?? NaN;
  return (at(to) - at(from)) / (to - from);
}

function sandboxBody(name: string) {
  return {
    apiVersion: 'agents.x-k8s.io/v1beta1',
    kind: 'Sandbox',
    metadata: {
      name,
      namespace: NS,
      labels: { 'sandbox.cocoonstack.io/simulated': 'true' },
      annotations: { 'sandbox.cocoonstack.io/ttl-seconds': '86400' },
    },
    spec: { podTemplate: { spec: { containers: [{ name: 'main', image: 'sandbox/minimal' }] } } },
  };
}

/**
 * Sandboxes `from`..`to`-1 created through sandbox-apiserver's own port (its create, without the aggregator hop).
 * A create left unanswered is sent again: 409 then means the first one made it (the name is the claim's identity).
 */
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

async function populate(direct: Https, from: number, to: number): Promise<{ ms: number; unanswered: string[] }> {
  const t0 = performance.now();
  const unanswered: string[] = [];
  await timed(to - from, 32, async (i) => {
    const name = `s-${String(from + i).padStart(6, '0')}`;
    for (let attempt = 0; ; attempt++) {
      const r = await direct
        .post(`${SANDBOXES}/namespaces/${NS}/sandboxes`, sandboxBody(name))
        .catch((err: unknown) => {
          if (!(err instanceof RequestTimeout) || unanswered.filter((n) => n === name).length >= 3) throw err;
          say(`  ${(err as Error).message}; sending it again`);
          unanswered.push(name);
          return undefined;
        });
      if (!r) continue;
      if (r.status === 201 || (r.status === 409 && unanswered.includes(name))) return;
      // No warm VM this instant on the nodes tried (the pool refills behind the creates).
      if (r.status !== 503 || attempt > 600)
        throw new Error(`create ${name}: HTTP ${r.status}: ${r.body.slice(0, 300)}`);
      await sleep(100);
    }
  });
  return { ms: performance.now() - t0, unanswered };
}

interface Reads {
  count: number;
  firstPage: number[];
  /** The same page from sandbox-apiserver's own port (no aggregator hop). */
  firstPageDirect: number[];
  /** kube-apiserver's own first page of namespaces, taken beside each first page: the machine's state then. */
  floorPage: number[];
  kubectlMs: number;
  kubectlRows: number;
  get: number[];
  watchSyncMs: number;
  watchEvents: number;
  heap: { bytesPerGet: number; storeHeapMiB: number };
  claimSerial: number[];
  /** The same serial claims sent to sandbox-apiserver's own port. */
  claimDirect: number[];
  /** Their mean time inside sandbox-apiserver's create, and inside the node's claim handling (the servers' histograms). */
  inServers: { apiserverMs: number; nodeMs: number };
  /** kube-apiserver's own create (a ConfigMap), serially, right after the serial claims: the machine's state then. */
  floorCreate: number[];
  claimC20: number[];
  rss: Record<string, number>;
}

function kubectlAll(p: Platform): Promise<{ ms: number; rows: number }> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    let rows = 0;
    const child = spawn(p.cluster.binaries.kubectl!, [
      `--kubeconfig=${p.cluster.kubeconfigPath}`,
      'get',
      'sandboxes',
      '-A',
      '--chunk-size=500',
      '--no-headers',
    ]);
    child.stdout.on('data', (d: Buffer) => {
      for (const c of d) if (c === 10) rows++;
    });
    let err = '';
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    child.on('exit', (code) =>
      code === 0 ? resolve({ ms: performance.now() - t0, rows }) : reject(new Error(`kubectl: ${code}: ${err}`)),
    );
  });
}

function getHeap(
  p: Platform,
  nodes: NodeRef[],
  expect: number,
): Promise<{ bytesPerGet: number; storeHeapMiB: number }> {
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      [
        '--expose-gc',
        '--max-semi-space-size=256',
        '--import',
        'tsx',
        join(HERE, 'get-heap.ts'),
        `--nodes=${nodes.map((n) => `${n.node}=${n.address}`).join(',')}`,
        `--token-file=${p.sandboxd[0]!.tokenFile}`,
        `--expect=${expect}`,
      ],
      { maxBuffer: 1 << 20 },
      (err, stdout) => (err ? reject(err) : resolve(JSON.parse(stdout.trim().split('\n').pop()!))),
    );
  });
}

async function measureReads(p: Platform, kube: Https, direct: Https, nodes: NodeRef[], count: number): Promise<Reads> {
  say(`reads at ${count} sandboxes`);
  const firstPage: number[] = [];
  const firstPageDirect: number[] = [];
  const floorPage: number[] = [];
  for (let i = 0; i < 20; i++) {
    for (const [client, into] of [
      [kube, firstPage],
      [direct, firstPageDirect],
    ] as const) {
      const r = await client.get(`${SANDBOXES}/sandboxes?limit=500`, TABLE);
      // A list of at most 500 is one page: no continue token then.
      if (r.status !== 200 || (count > 500 && !r.body.includes('"continue"')))
        throw new Error(`first page: HTTP ${r.status}${r.status === 200 ? ', no continue token' : ''}`);
      into.push(r.ms);
    }
    // The floor beside it: a page kube-apiserver serves itself (from its watch cache), at the same moment.
    const f = await kube.get('/api/v1/namespaces?limit=500', TABLE);
    if (f.status !== 200) throw new Error(`namespaces page: HTTP ${f.status}`);
    floorPage.push(f.ms);
  }
  const k = await kubectlAll(p);
  if (k.rows < count) throw new Error(`kubectl listed ${k.rows} of ${count}`);
  const get: number[] = [];
  for (let i = 0; i < 50; i++) {
    const name = `s-${String(Math.floor(Math.random() * count)).padStart(6, '0')}`;
    const r = await kube.get(`${SANDBOXES}/namespaces/${NS}/sandboxes/${name}`);
    if (r.status !== 200) throw new Error(`get ${name}: HTTP ${r.status}`);
    get.push(r.ms);
  }
  let events = 0;
  const watch = await kube.stream(
    `${SANDBOXES}/sandboxes?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true`,
    (line) => {
      if (line.startsWith('{"type":"ADDED"')) events++;
      return line.startsWith('{"type":"BOOKMARK"') && line.includes('initial-events-end');
    },
  );
  if (events < count) throw new Error(`watch: ${events} initial events of ${count}`);
  say('heap per Get (the server store, fed by the same feeds, in a child process)');
  const heap = await getHeap(p, nodes, count);
  say('claims through the aggregated API');
  const created: string[] = [];
  let seq = 0;
  const claimThrough = (client: Https) => async () => {
    const name = `c-${count}-${seq++}`;
    const r = await client.post(`${SANDBOXES}/namespaces/${NS}/sandboxes`, sandboxBody(name));
    const ready = (
      JSON.parse(r.body) as { status?: { conditions?: Array<{ type: string; status: string }> } }
    ).status?.conditions?.find((c) => c.type === 'Ready');
    if (r.status !== 201 || ready?.status !== 'True')
      throw new Error(`claim ${name}: HTTP ${r.status}: ${r.body.slice(0, 300)}`);
    created.push(name);
  };
  const claim = claimThrough(kube);
  const cleanup = async () => {
    await timed(
      created.length,
      16,
      async (i) => void (await kube.del(`${SANDBOXES}/namespaces/${NS}/sandboxes/${created[i]}`)),
    );
    created.length = 0;
  };
  for (let i = 0; i < 5; i++) await claim(); // warm connections and caches
  await cleanup();
  const claimSerial = await timed(CLAIMS, 1, claim);
  await cleanup();
  // The same claims without the aggregator's hop: what of the growth is sandbox-apiserver's and the nodes'.
  const inServers0 = await claimTimeInServers(direct, nodes);
  const claimDirect = await timed(CLAIMS, 1, claimThrough(direct));
  const inServers1 = await claimTimeInServers(direct, nodes);
  await cleanup();
  const inServers = {
    apiserverMs:
      ((inServers1.apiserverS - inServers0.apiserverS) * 1000) / (inServers1.apiserverN - inServers0.apiserverN),
    nodeMs: ((inServers1.nodeS - inServers0.nodeS) * 1000) / (inServers1.nodeN - inServers0.nodeN),
  };
  // The floor beside it: a create kube-apiserver serves itself (a ConfigMap: one etcd write), as many, serially.
  const floorCreate = await timed(CLAIMS, 1, async (i) => {
    const r = await kube.post(`/api/v1/namespaces/${NS}/configmaps`, {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: `floor-${count}-${i}` },
      data: { n: String(i) },
    });
    if (r.status !== 201) throw new Error(`floor create: HTTP ${r.status}: ${r.body.slice(0, 200)}`);
  });
  await timed(
    CLAIMS,
    16,
    async (i) => void (await kube.del(`/api/v1/namespaces/${NS}/configmaps/floor-${count}-${i}`)),
  );
  const claimC20 = await timed(CLAIMS * 2, 20, claim);
  await cleanup();
  const p50s = (xs: number[]) => pct(xs, 50).toFixed(1);
  say(
    `reads at ${count}: first page p50 ${p50s(firstPage)} ms, kubectl ${k.ms.toFixed(0)} ms, get p50 ${p50s(get)} ms, ` +
      `watch sync ${watch.ms.toFixed(0)} ms, heap/Get ${heap.bytesPerGet.toFixed(0)} B, claims p50 serial ${p50s(claimSerial)} / c20 ${p50s(claimC20)} ms`,
  );
  return {
    count,
    firstPage,
    firstPageDirect,
    floorPage,
    kubectlMs: k.ms,
    kubectlRows: k.rows,
    get,
    watchSyncMs: watch.ms,
    watchEvents: events,
    heap,
    claimSerial,
    claimDirect,
    inServers,
    floorCreate,
    claimC20,
    rss: platformRss(p),
  };
}

async function waitFull(kube: Https, nodes: NodeRef[]): Promise<void> {
  for (let i = 0; (await warmOnNodes(nodes)) < S || (await readyReplicas(kube)) < S; i++) {
    if (i > 6000) throw new Error('the pool did not refill in 10 min');
    await sleep(100);
  }
}

async function main(): Promise<void> {
  const env = readClusterEnvironment();
  say(
    `starting: control plane, sandbox-apiserver, ${N} SIMULATED sandboxd nodes (clone ${CLONE_MS} ms, refill ${CONC})`,
  );
  const p = await startPlatform({
    cacheDir: env.cacheDir,
    binDir: env.binDir,
    dataDir: `/tmp/sbx-bench-scale-${process.pid}`,
    layout: 'aggregated',
    simulatedNodes: 0,
    sandboxdNodes: N,
    warm: 0,
    template: 'sandbox/minimal',
    sandboxdArgs: [
      '--engine=sim',
      `--sim-clone-ms=${CLONE_MS}`,
      `--refill-concurrency=${CONC}`,
      `--max-claims=${S}`,
      `--publish-interval=${PUBLISH_S}`,
      '--default-ttl-seconds=86400',
    ],
    etcdFsync: true,
    logger: createLogger({ level: 'warn', name: 'bench' }),
    progress: say,
  });
  try {
    const kube = adminHttps(p, p.cluster.server, p.cluster.pki.ca.cert);
    const direct = adminHttps(p, `https://${p.apiserver!.address}`, p.apiserver!.caFile);
    const nodes = await nodeRefs(p);
    await p.cluster.kubectl(['create', 'namespace', NS]);
    await p.cluster.kubectl(
      ['apply', '-n', NS, '-f', '-'],
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'List',
        items: [
          {
            apiVersion: 'extensions.agents.x-k8s.io/v1beta1',
            kind: 'SandboxTemplate',
            metadata: { name: 'sim' },
            spec: { podTemplate: { spec: { containers: [{ name: 'main', image: 'sandbox/minimal' }] } } },
          },
          {
            apiVersion: 'extensions.agents.x-k8s.io/v1beta1',
            kind: 'SandboxWarmPool',
            metadata: { name: 'pool' },
            spec: { replicas: 0, sandboxTemplateRef: { name: 'sim' } },
          },
        ],
      }),
    );
    await sleep(3000); // the namespace's own objects, the driver's first pass
    const keys0 = await etcdKeys(p.cluster.netns);
    const idle0 = await etcdWrites(p.cluster.netns);
    await sleep(20_000);
    const idleRate = ((await etcdWrites(p.cluster.netns)).total - idle0.total) / 20;
    say(`idle: ${keys0.length} etcd keys, ${idleRate.toFixed(2)} writes/s`);

    const fills: Fill[] = [];
    for (const size of [S / 4, S / 2, S]) {
      say(`fill 0 -> ${size}`);
      fills.push(await fill(p, kube, nodes, size));
      const f = fills[fills.length - 1]!;
      say(`  nodes ${(f.nodesMs / 1000).toFixed(2)} s, readyReplicas ${(f.statusMs / 1000).toFixed(2)} s`);
      if (size !== S) await drain(kube, nodes);
    }
    const rssFull = platformRss(p);
    // Each phase's raw figures as they are measured, so a later failure still leaves them.
    say(`fills: ${JSON.stringify(fills)}`);

    const small = S / 10;
    say(`creating ${small} sandboxes`);
    const popSmall = await populate(direct, 0, small);
    await waitFull(kube, nodes);
    const readsSmall = await measureReads(p, kube, direct, nodes, small);
    say(`creating ${S - small} more sandboxes`);
    const popRest = await populate(direct, small, S);
    await waitFull(kube, nodes);
    const inventories = await Promise.all(
      nodes.map(async (n) => {
        const r = await kube.get(`/apis/extensions.agents.x-k8s.io/v1beta1/nodeinventories/${n.node}`);
        const obj = JSON.parse(r.body) as { entries?: unknown[]; metadata: { annotations?: Record<string, string> } };
        return {
          bytes: Buffer.byteLength(r.body),
          entries: obj.entries?.length ?? 0,
          annotations: obj.metadata.annotations ?? {},
        };
      }),
    );
    const readsFull = await measureReads(p, kube, direct, nodes, S);
    const keys1 = await etcdKeys(p.cluster.netns);

    // ------------------------------------------------------------------ report
    const fit = fitLine(fills.map((f) => ({ x: f.size, y: f.nodesMs / 1000 })));
    const fitStatus = fitLine(fills.map((f) => ({ x: f.size, y: f.statusMs / 1000 })));
    const r = 1 / (fit.b * N);
    // A common window for every fill: whole publish intervals inside the shortest fill (at least one).
    const shortest = Math.min(...fills.map((f) => f.nodesMs)) / 1000;
    const win = Math.max(PUBLISH_S, Math.floor((shortest - 1) / PUBLISH_S) * PUBLISH_S);
    const rates = fills.map((f) => rate(f, 1, 1 + win));
    const whole = fills.map((f) => rate(f, 1, Math.max(2, Math.floor(f.nodesMs / 1000))));
    const bound = N / PUBLISH_S + 1 + 5;
    const added = keys1.filter((k) => !new Set(keys0).has(k));
    const removed = keys0.filter((k) => !new Set(keys1).has(k));
    const kinds = (ks: string[]) => {
      const m = new Map<string, number>();
      for (const k of ks) m.set(keyKind(k), (m.get(keyKind(k)) ?? 0) + 1);
      return [...m].map(([k, n]) => `${k} ${n}`).join(', ');
    };
    const sandboxApiObjects = keys1.filter((k) => /agents\.x-k8s\.io\//.test(k));
    const p50 = (xs: number[]) => pct(xs, 50);
    const rs = readsSmall;
    const rf = readsFull;
    /** One table row: the same figure at the small count and at S. */
    const row = (label: string, figure: (r: typeof rs) => string) => `| ${label} | ${figure(rs)} | ${figure(rf)} |`;
    const p50p99 = (xs: number[]) => `${ms(p50(xs))} / ${ms(pct(xs, 99))}`;
    const invMax = Math.max(...inventories.map((i) => i.bytes));
    const perEntry = Math.max(...inventories.filter((i) => i.entries > 0).map((i) => i.bytes / i.entries));
    const verdict = (ok: boolean) => (ok ? 'pass' : 'MISS');
    const out = [
      '',
      `bench/scale — ${new Date().toISOString()}; ${N} SIMULATED sandboxd nodes (clone ${CLONE_MS} ms, refill concurrency ${CONC}, publish every ${PUBLISH_S} s), etcd fsync on; ${machineIdleSettings()}`,
      '',
      '| fill 0 → S (one patch) | full supply, node telemetry | status.readyReplicas | etcd writes/s (first ' +
        win +
        ' s) | etcd writes/s (whole fill) |',
      '|---|---|---|---|---|',
      ...fills.map(
        (f, i) =>
          `| ${f.size} | ${(f.nodesMs / 1000).toFixed(2)} s (${((f.size * 1000) / f.nodesMs).toFixed(0)}/s) | ${(f.statusMs / 1000).toFixed(2)} s | ${rates[i]!.toFixed(2)} | ${whole[i]!.toFixed(2)} |`,
      ),
      '',
      `fit (node telemetry): T = ${fit.a.toFixed(2)} s + S / (${N} × ${r.toFixed(1)}/s)   (readyReplicas: T₀ ${fitStatus.a.toFixed(2)} s, r ${(1 / (fitStatus.b * N)).toFixed(1)}/s)`,
      `sim ceiling per node: concurrency / clone time = ${(CONC / (CLONE_MS / 1000)).toFixed(1)}/s; etcd idle ${idleRate.toFixed(2)} writes/s`,
      `creates through sandbox-apiserver's port: ${small} in ${(popSmall.ms / 1000).toFixed(1)} s, ${S - small} in ${(popRest.ms / 1000).toFixed(1)} s (${(((S - small) * 1000) / popRest.ms).toFixed(0)}/s); unanswered within ${REQUEST_TIMEOUT_MS / 1000} s and sent again: ${[...popSmall.unanswered, ...popRest.unanswered].join(', ') || 'none'}`,
      '',
      `| at N sandboxes | ${rs.count} | ${rf.count} |`,
      '|---|---|---|',
      row('first page, limit 500 (Table), p50 / p99', (r) => p50p99(r.firstPage)),
      row("same page from sandbox-apiserver's port (no aggregator hop), p50 / p99", (r) => p50p99(r.firstPageDirect)),
      row("floor: kube-apiserver's own first page (namespaces, Table), beside each, p50 / p99", (r) =>
        p50p99(r.floorPage),
      ),
      row(
        '`kubectl get sandboxes -A --chunk-size=500`, total',
        (r) => `${(r.kubectlMs / 1000).toFixed(2)} s (${r.kubectlRows} rows)`,
      ),
      row('Get by name p50 / p99', (r) => p50p99(r.get)),
      row(
        'watch initial sync (WatchList to initial-events-end)',
        (r) => `${(r.watchSyncMs / 1000).toFixed(2)} s (${r.watchEvents})`,
      ),
      row('heap allocated per Get', (r) => `${r.heap.bytesPerGet.toFixed(0)} B`),
      row('store heap (child process, all entries)', (r) => `${r.heap.storeHeapMiB.toFixed(0)} MiB`),
      row(`claim create → 201 Ready, serial p50 / p99 (n=${CLAIMS})`, (r) => p50p99(r.claimSerial)),
      row("same claims to sandbox-apiserver's port (no aggregator hop), serial p50 / p99", (r) =>
        p50p99(r.claimDirect),
      ),
      row(
        "... their mean inside sandbox-apiserver's create / inside the node's claim handling (servers' histograms)",
        (r) => `${ms(r.inServers.apiserverMs)} / ${ms(r.inServers.nodeMs)} (client mean ${ms(mean(r.claimDirect))})`,
      ),
      row("floor: kube-apiserver's own create (ConfigMap), serial p50 / p99, right after", (r) =>
        p50p99(r.floorCreate),
      ),
      row(`claim create → 201 Ready, c=20 p50 / p99 (n=${CLAIMS * 2})`, (r) => p50p99(r.claimC20)),
      row(
        'RSS sandboxd sum / max node (MiB)',
        (r) => `${r.rss.sandboxdSum!.toFixed(0)} / ${r.rss.sandboxdMax!.toFixed(0)}`,
      ),
      row(
        'RSS sandbox-apiserver / kube-apiserver / etcd (MiB)',
        (r) => `${r.rss.sandboxApiserver!.toFixed(0)} / ${r.rss.kubeApiserver!.toFixed(0)} / ${r.rss.etcd!.toFixed(0)}`,
      ),
      '',
      `RSS with ${S} warm and no claims: sandboxd sum ${rssFull.sandboxdSum!.toFixed(0)} MiB (max node ${rssFull.sandboxdMax!.toFixed(0)}), sandbox-apiserver ${rssFull.sandboxApiserver!.toFixed(0)} MiB`,
      `NodeInventory at ${S} sandboxes: largest ${(invMax / 1024).toFixed(0)} KiB, ${Math.max(...inventories.map((i) => i.entries))} entries listed (${perEntry.toFixed(0)} B each; ${inventories[0]!.annotations['sandbox.cocoonstack.io/inventory-entries'] ?? 'not capped'}); uncapped it would be ~${((perEntry * (S / N)) / 1024).toFixed(0)} KiB per node, over etcd's 1.5 MiB at ~${Math.floor((1.5 * 2 ** 20) / perEntry)} claims per node`,
      `etcd keys: ${keys0.length} at 0 sandboxes -> ${keys1.length} at ${S}; added: ${kinds(added) || 'none'}; gone: ${kinds(removed) || 'none'}`,
      `objects of the sandbox APIs in etcd: ${sandboxApiObjects.length} (${kinds(sandboxApiObjects)})`,
      '',
      '| target | measured | verdict |',
      '|---|---|---|',
      `| etcd writes/s during the fill ≤ nodes/publish-interval + pools + 5 = ${bound.toFixed(1)} | ${Math.max(...rates).toFixed(2)} (max over the fills) | ${verdict(Math.max(...rates) <= bound)} |`,
      `| ... the same at S/4 and S within 20 % | ${(rates[2]! / rates[0]!).toFixed(2)}× | ${verdict(Math.abs(rates[2]! / rates[0]! - 1) <= 0.2)} |`,
      `| etcd objects ≤ pools + nodes + 5 = ${1 + N + 5} (sandbox-API objects; keys added from 0 to S sandboxes: ${added.length - removed.length}) | ${sandboxApiObjects.length} | ${verdict(sandboxApiObjects.length <= 1 + N + 5 && added.length - removed.length <= 5)} |`,
      `| first page at ${S} ≤ 2× at ${small} | ${(p50(rf.firstPage) / p50(rs.firstPage)).toFixed(2)}× (from sandbox-apiserver's port ${(p50(rf.firstPageDirect) / p50(rs.firstPageDirect)).toFixed(2)}×; the floor beside it ${(p50(rf.floorPage) / p50(rs.floorPage)).toFixed(2)}×) | ${verdict(p50(rf.firstPage) <= 2 * p50(rs.firstPage))} |`,
      `| heap per Get at ${S} ≤ 1.2× at ${small} | ${(rf.heap.bytesPerGet / rs.heap.bytesPerGet).toFixed(2)}× | ${verdict(rf.heap.bytesPerGet <= 1.2 * rs.heap.bytesPerGet)} |`,
      `| claim p50 at ${S} ≤ 1.2× at ${small} | ${(p50(rf.claimSerial) / p50(rs.claimSerial)).toFixed(2)}× (to sandbox-apiserver's port ${(p50(rf.claimDirect) / p50(rs.claimDirect)).toFixed(2)}×; the floor beside it ${(p50(rf.floorCreate) / p50(rs.floorCreate)).toFixed(2)}×) | ${verdict(p50(rf.claimSerial) <= 1.2 * p50(rs.claimSerial))} |`,
      `| T₀ ≤ 2 s | ${fit.a.toFixed(2)} s (readyReplicas ${fitStatus.a.toFixed(2)} s) | ${verdict(fit.a <= 2)} |`,
    ];
    process.stdout.write(`${out.join('\n')}\n`);
  } finally {
    await p.stop();
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    process.stderr.write(`bench/scale failed: ${(err as Error).stack ?? String(err)}\n`);
    process.exit(1);
  },
);
