/**
 * Exclusivity under fire: a warm pool, many claims from concurrent clients (each creates a claim, waits for Ready
 * through a shared watch, then deletes it), while the operator — a child process — is SIGKILLed and restarted.
 * A watcher over the whole run checks that no Sandbox is ever owned by two claims, no claim controls two Sandboxes
 * and no claim's `status.sandbox.name` changes. At the end every remaining claim must be Ready or cleanly pending.
 *
 *   node --import tsx bench/claim-fire.ts [--pool 50] [--claims 1000] [--clients 20] [--kills 2] [--fsync true]
 *
 * test/operator/claim-exclusivity.test.ts runs a smaller version against the test cluster.
 */
import { Leases, SandboxClaims, Sandboxes, type KubeClient, type Lease } from '../src/kube/index.js';
import type { ClaimObj, SandboxObj } from '../src/operator/extensions/support.js';
import {
  claim,
  InvariantWatcher,
  isClaimReady,
  OperatorProcess,
  ReadyWaiter,
  setupPool,
  waitPool,
  watchAll,
} from './claim-driver.js';

export interface FireOptions {
  client: KubeClient;
  kubeconfig: string;
  namespace: string;
  poolSize: number;
  claims: number;
  clients: number;
  kills: number;
  /**
   * Operator replicas; more than one needs leaderElection (a Lease in the run's namespace), and each kill then
   * takes the current leader, so a standby has to take over.
   */
  replicas?: number;
  leaderElection?: boolean;
  /** Per-claim wait for Ready before the client moves on (the claim is then left for the final check). */
  claimTimeoutMs?: number;
  progress?: (line: string) => void;
}

export interface FireReport {
  claims: number;
  readyObserved: number;
  timedOut: number;
  operatorStarts: number;
  finalReady: number;
  finalPending: Array<{ name: string; reason: string | undefined }>;
  violations: string[];
  watchEvents: number;
  wallMs: number;
}

const CLEAN_PENDING = new Set([undefined, 'SandboxNotReady', 'DependenciesNotReady', 'SandboxCreatePending']);

export async function runUnderFire(o: FireOptions): Promise<FireReport> {
  const { client: c, namespace: ns } = o;
  const log = o.progress ?? (() => {});
  const electionArgs = o.leaderElection ? ['--leader-elect=true', `--leader-election-namespace=${ns}`] : [];
  const ops = Array.from({ length: o.replicas ?? 1 }, () => new OperatorProcess(o.kubeconfig, ns, electionArgs));
  const stop = new AbortController();
  const inv = new InvariantWatcher();
  const waiter = new ReadyWaiter();
  const t0 = performance.now();
  try {
    await setupPool(c, ns, o.poolSize);
    for (const op of ops) op.start();
    await waitPool(c, ns, 'pool', o.poolSize, 180_000, log);
    const sbList = await c.list<SandboxObj>(Sandboxes, ns, { limit: 1 });
    const clList = await c.list<ClaimObj>(SandboxClaims, ns, { limit: 1 });
    const watches = [
      watchAll<SandboxObj>(c, Sandboxes, ns, sbList.metadata.resourceVersion!, inv.onSandbox, stop.signal),
      watchAll<ClaimObj>(
        c,
        SandboxClaims,
        ns,
        clList.metadata.resourceVersion!,
        (t, cl) => (inv.onClaim(t, cl), waiter.onEvent(t, cl)),
        stop.signal,
      ),
    ];

    let next = 0;
    let done = 0;
    let readyObserved = 0;
    let timedOut = 0;
    const killAt = Array.from({ length: o.kills }, (_, i) => Math.floor(((i + 1) * o.claims) / (o.kills + 1)));
    const pendingNames: string[] = [];
    const clientLoop = async (id: number) => {
      for (;;) {
        const i = next++;
        if (i >= o.claims) return;
        const name = `fire-${id}-${i}`;
        try {
          await c.create(SandboxClaims, claim(ns, name, 'pool'));
        } catch (err) {
          log(`create ${name} failed: ${(err as Error).message}`);
          continue;
        }
        const t = await waiter.wait(name, o.claimTimeoutMs ?? 30_000);
        if (t === undefined) {
          timedOut++;
          pendingNames.push(name);
        } else {
          readyObserved++;
          await c.delete(SandboxClaims, ns, name).catch(() => {});
          waiter.forget(name);
        }
        done++;
        if (killAt.length && done >= killAt[0]!) {
          killAt.shift();
          log(`SIGKILL operator after ${done} claims at ${new Date().toISOString()}`);
          const op = o.leaderElection ? await leaderOf(c, ns, ops) : ops[0]!;
          await op.kill('SIGKILL');
          op.start();
          log(`operator restarted at ${new Date().toISOString()}`);
        }
        if (done % 50 === 0)
          log(
            `${((performance.now() - t0) / 1000).toFixed(1)}s ${done}/${o.claims} claims done (${readyObserved} Ready, ${timedOut} timed out, ${inv.violations.length} violations)`,
          );
      }
    };
    await Promise.all(Array.from({ length: o.clients }, (_, id) => clientLoop(id)));

    // Final state: every claim still present is Ready or cleanly pending (give stragglers time to converge).
    const deadline = Date.now() + 60_000;
    let remaining: ClaimObj[] = [];
    for (;;) {
      remaining = (await c.list<ClaimObj>(SandboxClaims, ns)).items.filter((x) => !x.metadata.deletionTimestamp);
      if (remaining.every(isClaimReady) || Date.now() > deadline) break;
      await new Promise((r) => setTimeout(r, 500));
    }
    const finalPending = remaining
      .filter((x) => !isClaimReady(x))
      .map((x) => ({ name: x.metadata.name!, reason: x.status?.conditions?.find((k) => k.type === 'Ready')?.reason }));
    for (const p of finalPending)
      if (!CLEAN_PENDING.has(p.reason)) inv.violations.push(`claim ${p.name} ended with Ready reason ${p.reason}`);
    stop.abort();
    await Promise.allSettled(watches);
    return {
      claims: o.claims,
      readyObserved,
      timedOut,
      operatorStarts: ops.reduce((n, op) => n + op.starts, 0),
      finalReady: remaining.filter(isClaimReady).length,
      finalPending,
      violations: inv.violations,
      watchEvents: inv.events,
      wallMs: performance.now() - t0,
    };
  } finally {
    stop.abort();
    await Promise.all(ops.map((op) => op.kill('SIGTERM')));
  }
}

/** The replica holding the operator's Lease (its identity carries the pid); the first one if none does yet. */
async function leaderOf(c: KubeClient, ns: string, ops: OperatorProcess[]): Promise<OperatorProcess> {
  const lease = await c.get<Lease>(Leases, ns, 'sandbox-operator.agents.x-k8s.io').catch(() => undefined);
  const pid = Number(/_(\d+)_[0-9a-f-]+$/.exec(lease?.spec?.holderIdentity ?? '')?.[1]);
  return ops.find((op) => op.pid === pid) ?? ops[0]!;
}

async function main(): Promise<void> {
  const { parseArgs } = await import('node:util');
  const { values } = parseArgs({
    options: {
      pool: { type: 'string', default: '50' },
      claims: { type: 'string', default: '1000' },
      clients: { type: 'string', default: '20' },
      kills: { type: 'string', default: '2' },
      fsync: { type: 'string', default: 'true' },
    },
  });
  const { startCluster, readClusterEnvironment } = await import('../src/cluster/index.js');
  const { installCrds } = await import('../test/support/crds.js');
  const { KubeClient } = await import('../src/kube/index.js');
  const env = readClusterEnvironment();
  const fsync = values.fsync !== 'false';
  const cluster = await startCluster({
    cacheDir: env.cacheDir,
    binDir: env.binDir,
    simulatedNodes: 2,
    etcdFsync: fsync,
    progress: (l) => process.stderr.write(`${l}\n`),
  });
  try {
    await installCrds(cluster.kubectl);
    const ns = 'fire';
    await cluster.kubectl(['create', 'namespace', ns]);
    const client = await KubeClient.fromKubeconfig(cluster.kubeconfigPath, { qps: -1 });
    const report = await runUnderFire({
      client,
      kubeconfig: cluster.kubeconfigPath,
      namespace: ns,
      poolSize: Number(values.pool),
      claims: Number(values.claims),
      clients: Number(values.clients),
      kills: Number(values.kills),
      progress: (l) => process.stderr.write(`${l}\n`),
    });
    client.close();
    process.stdout.write(
      `${JSON.stringify({ etcdFsync: fsync, ...report, finalPending: report.finalPending.slice(0, 20) }, null, 2)}\n`,
    );
    if (report.violations.length) process.exitCode = 1;
  } finally {
    await cluster.stop();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) await main();
