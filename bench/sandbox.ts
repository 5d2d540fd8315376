/**
 * Sandbox controller benchmark (not a test): on a private real control plane with kwok-simulated nodes and the
 * operator as a child process (bin/sandbox-operator.mjs, its own event loop and RSS):
 *
 *   1. create → Ready latency, p50/p95, for 200 Sandboxes at concurrency 1 and at concurrency 20
 *      (create sent → Ready=True seen on one client watch);
 *   2. L0 figures from the apiserver's own /metrics (`apiserver_request_total` by verb and resource) and the
 *      operator's `rest_client_requests_total`, over a 60 s steady state with 500 Ready Sandboxes, then after a
 *      forced resync of all of them (SIGUSR2 → manager.resyncAll() in the child);
 *   3. operator RSS and heap with 0, 500 and 1 000 cached Ready Sandboxes (each with its Pod and Service).
 *
 *   node --import tsx bench/sandbox.ts [--steady-seconds 60] [--latency-count 200] [--l0-count 500] [--rss-count 1000] [--fsync]
 */
import { freePort } from '../src/net/free-port.js';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import { readClusterEnvironment, startCluster } from '../src/cluster/index.js';
import { KubeClient, Namespaces, Sandboxes, type KubeObject } from '../src/kube/index.js';
import type { SandboxObject } from '../src/operator/sandbox/index.js';
import { installCrds } from '../test/support/crds.js';
import { sumWhere } from './support/apiserver-metrics.js';

const { values: args } = parseArgs({
  options: {
    'steady-seconds': { type: 'string', default: '60' },
    'latency-count': { type: 'string', default: '200' },
    'l0-count': { type: 'string', default: '500' },
    'rss-count': { type: 'string', default: '1000' },
    fsync: { type: 'boolean', default: false },
    /** Print every apiserver_request_total series that moved during the steady state (who wrote what). */
    dump: { type: 'boolean', default: false },
  },
});
const STEADY_S = Number(args['steady-seconds']);
const LATENCY_N = Number(args['latency-count']);
const L0_N = Number(args['l0-count']);
const RSS_N = Number(args['rss-count']);
const NS = 'bench-sandbox';
const log = (m: string) => process.stderr.write(`${m}\n`);

function manifest(name: string): SandboxObject {
  return {
    apiVersion: 'agents.x-k8s.io/v1beta1',
    kind: 'Sandbox',
    metadata: { name, namespace: NS },
    spec: {
      service: true,
      podTemplate: {
        metadata: { labels: { app: 'bench' } },
        spec: { containers: [{ name: 'main', image: 'registry.k8s.io/pause:3.10', ports: [{ containerPort: 8888 }] }] },
      },
    },
  };
}

const isReady = (sb: SandboxObject) =>
  sb.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;

/** One watch on the namespace's Sandboxes; resolves per-name waiters the moment Ready=True arrives. */
class ReadyWatch {
  private readonly ready = new Map<string, number>();
  private readonly waiters = new Map<string, (t: number) => void>();
  private readonly ctrl = new AbortController();

  constructor(private readonly client: KubeClient) {}

  start(resourceVersion: string): void {
    const loop = async (rv: string) => {
      while (!this.ctrl.signal.aborted) {
        await this.client
          .watch<SandboxObject>(
            Sandboxes,
            NS,
            { resourceVersion: rv, allowWatchBookmarks: true, timeoutSeconds: 600 },
            (ev) => {
              if (ev.object.metadata?.resourceVersion) rv = ev.object.metadata.resourceVersion;
              if (ev.type === 'BOOKMARK' || ev.type === 'ERROR' || ev.type === 'DELETED') return;
              const name = ev.object.metadata.name ?? '';
              if (isReady(ev.object) && !this.ready.has(name)) {
                const t = performance.now();
                this.ready.set(name, t);
                this.waiters.get(name)?.(t);
              }
            },
            this.ctrl.signal,
          )
          .catch(() => {});
      }
    };
    void loop(resourceVersion);
  }

  until(name: string): Promise<number> {
    const t = this.ready.get(name);
    if (t !== undefined) return Promise.resolve(t);
    return new Promise((r) => this.waiters.set(name, r));
  }

  get readyCount(): number {
    return this.ready.size;
  }

  stop(): void {
    this.ctrl.abort();
  }
}

function pct(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? NaN;
}

const RESOURCES = ['sandboxes', 'pods', 'services', 'persistentvolumeclaims'];
const WRITES = /^(POST|PUT|PATCH|DELETE|APPLY|CREATE|UPDATE)$/;

async function main(): Promise<void> {
  const env = readClusterEnvironment();
  const cluster = await startCluster({
    cacheDir: env.cacheDir,
    binDir: env.binDir,
    simulatedNodes: 2,
    etcdFsync: args.fsync,
    progress: log,
  });
  let child: ReturnType<typeof spawn> | undefined;
  const client = await KubeClient.fromKubeconfig(cluster.kubeconfigPath, { qps: -1 });
  // Ctrl-C / SIGTERM still tears the private cluster down.
  for (const sig of ['SIGINT', 'SIGTERM'] as const)
    process.once(sig, () => {
      child?.kill('SIGTERM');
      void cluster.stop().finally(() => process.exit(130));
    });
  try {
    await installCrds(cluster.kubectl);
    await client.create<KubeObject>(Namespaces, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } });
    const metricsPort = await freePort();
    child = spawn(
      process.execPath,
      [
        '--expose-gc',
        '--import',
        'tsx',
        fileURLToPath(new URL('./sandbox-operator.ts', import.meta.url)),
        `--kubeconfig=${cluster.kubeconfigPath}`,
        `--namespace=${NS}`,
        '--leader-elect=false',
        '--extensions=false',
        '--enable-webhook=false',
        '--manage-webhook-certs=false',
        '--kube-api-qps=-1',
        `--metrics-bind-address=127.0.0.1:${metricsPort}`,
        '--health-probe-bind-address=0',
        '--zap-log-level=warn',
      ],
      { stdio: ['ignore', 'inherit', 'inherit'] },
    );
    const opMetrics = async () => (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
    const rssMiB = () => {
      const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${child!.pid}/status`, 'utf8'));
      return m ? Math.round((Number(m[1]) / 1024) * 10) / 10 : NaN;
    };
    const settle = async () => {
      child!.kill('SIGHUP');
      await sleep(1500);
    };
    const heapMiB = async () =>
      Math.round((Number(/^nodejs_heap_size_used_bytes (\S+)/m.exec(await opMetrics())?.[1]) / 2 ** 20) * 10) / 10;
    for (let i = 0; ; i++) {
      try {
        await opMetrics();
        break;
      } catch {
        if (i > 100) throw new Error('operator did not start');
        await sleep(100);
      }
    }
    await sleep(1000);
    await settle();
    const idle = { rssMiB: rssMiB(), heapMiB: await heapMiB() };

    const list = await client.list<SandboxObject>(Sandboxes, NS);
    const watch = new ReadyWatch(client);
    watch.start(list.metadata.resourceVersion ?? '0');

    // 1. create → Ready latency
    const latency: Record<string, { p50: number; p95: number; max: number; wallS: number }> = {};
    let seq = 0;
    for (const concurrency of [1, 20]) {
      const samples: number[] = [];
      let next = 0;
      const t0 = performance.now();
      await Promise.all(
        Array.from({ length: concurrency }, async () => {
          while (next < LATENCY_N) {
            next++;
            const name = `lat-c${concurrency}-${seq++}`;
            const started = performance.now();
            await client.create(Sandboxes, manifest(name));
            samples.push((await watch.until(name)) - started);
          }
        }),
      );
      samples.sort((a, b) => a - b);
      latency[`concurrency ${concurrency}`] = {
        p50: Math.round(pct(samples, 50)),
        p95: Math.round(pct(samples, 95)),
        max: Math.round(samples.at(-1) ?? NaN),
        wallS: Math.round((performance.now() - t0) / 100) / 10,
      };
      log(`latency at concurrency ${concurrency}: ${JSON.stringify(latency[`concurrency ${concurrency}`])}`);
    }

    // 2. fill to L0_N Ready Sandboxes, then measure a steady state and a forced resync
    const fill = async (target: number) => {
      const have = watch.readyCount;
      const names = Array.from({ length: Math.max(0, target - have) }, (_, i) => `l0-${have + i}`);
      for (let i = 0; i < names.length; i += 50) {
        await Promise.all(names.slice(i, i + 50).map((n) => client.create(Sandboxes, manifest(n))));
      }
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(
          () =>
            reject(
              new Error(`only ${watch.readyCount}/${target} Sandboxes Ready after 5 min (simulated nodes overloaded?)`),
            ),
          300_000,
        );
      });
      try {
        await Promise.race([Promise.all(names.map((n) => watch.until(n))), timeout]);
      } finally {
        clearTimeout(timer);
      }
    };
    await fill(L0_N);
    log(`${L0_N} Sandboxes Ready; settling`);
    let last = -1;
    for (;;) {
      const w = sumWhere(await opMetrics(), 'rest_client_requests_total', { verb: /^(create|update|patch|delete)/ });
      if (w === last) break;
      last = w;
      await sleep(2000);
    }
    const snap = async () => {
      const api = await client.raw('GET', '/metrics');
      const op = await opMetrics();
      const out: Record<string, number> = {};
      for (const r of RESOURCES) {
        out[`apiserver LIST ${r}`] = sumWhere(api, 'apiserver_request_total', { verb: 'LIST', resource: r });
        out[`apiserver writes ${r}`] = sumWhere(api, 'apiserver_request_total', { verb: WRITES, resource: r });
      }
      out['operator LIST'] = sumWhere(op, 'rest_client_requests_total', { verb: 'list' });
      out['operator writes'] = sumWhere(op, 'rest_client_requests_total', { verb: /^(create|update|patch|delete)/ });
      out['operator GET'] = sumWhere(op, 'rest_client_requests_total', { verb: 'get' });
      out['operator reconciles'] = sumWhere(op, 'controller_runtime_reconcile_total', { controller: 'sandbox' });
      return out;
    };
    const diff = (a: Record<string, number>, b: Record<string, number>) =>
      Object.fromEntries(Object.keys(a).map((k) => [k, b[k]! - a[k]!]));
    const series = async () => {
      const out = new Map<string, number>();
      for (const line of (await client.raw('GET', '/metrics')).split('\n')) {
        const m = /^(apiserver_request_total\{.*\})\s+(\S+)/.exec(line);
        if (m && RESOURCES.some((r) => m[1]!.includes(`resource="${r}"`))) out.set(m[1]!, Number(m[2]));
      }
      return out;
    };
    const before = args.dump ? await series() : undefined;
    const s0 = await snap();
    await sleep(STEADY_S * 1000);
    const s1 = await snap();
    if (before) {
      for (const [k, v] of await series())
        if (v !== (before.get(k) ?? 0)) log(`moved: ${k} +${v - (before.get(k) ?? 0)}`);
    }
    const steady = diff(s0, s1);
    log(`L0 steady state (${L0_N} Ready, ${STEADY_S} s): ${JSON.stringify(steady)}`);
    child.kill('SIGUSR2');
    for (let i = 0; i < 100; i++) {
      const s = await snap();
      if (s['operator reconciles']! >= s1['operator reconciles']! + L0_N) break;
      await sleep(200);
    }
    await sleep(2000);
    const s2 = await snap();
    const resync = diff(s1, s2);
    log(`L0 forced resync of ${L0_N}: ${JSON.stringify(resync)}`);
    await settle();
    const at500 = { rssMiB: rssMiB(), heapMiB: await heapMiB() };

    // 3. RSS at RSS_N (1 000) cached Sandboxes
    await fill(RSS_N);
    await sleep(3000);
    await settle();
    const atRss = { rssMiB: rssMiB(), heapMiB: await heapMiB() };

    const report = {
      command: 'node --import tsx bench/sandbox.ts',
      etcdFsync: args.fsync,
      createToReadyMs: latency,
      l0: { sandboxes: L0_N, steadySeconds: STEADY_S, steady, resync },
      memory: {
        idle,
        [`${L0_N} Ready`]: at500,
        [`${RSS_N} Ready`]: atRss,
        // Slope between two warm points (startup transients make the idle reading a poor baseline for RSS).
        rssMiBPer1000: Math.round(((atRss.rssMiB - at500.rssMiB) / (RSS_N - L0_N)) * 1000 * 10) / 10,
        heapMiBPer1000: Math.round(((atRss.heapMiB - at500.heapMiB) / (RSS_N - L0_N)) * 1000 * 10) / 10,
      },
    };
    process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
  } finally {
    child?.kill('SIGTERM');
    client.close();
    await cluster.stop();
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    log(`bench failed: ${err instanceof Error ? err.stack : String(err)}`);
    process.exit(1);
  },
);
