/**
 * Shared machinery of the claim benchmark and the exclusivity-under-fire run: manifests, an operator child process,
 * a single shared watch that resolves "claim Ready" waiters, and an invariant watcher over Sandboxes and claims.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  controllerOf,
  SandboxClaims,
  Sandboxes,
  SandboxTemplates,
  SandboxWarmPools,
  type KubeClient,
  type ResourceType,
} from '../src/kube/index.js';
import type { ClaimObj, PoolObj, SandboxObj, TemplateObj } from '../src/operator/extensions/support.js';
import { processCpuMs } from './machine.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

export const isClaimReady = (c: ClaimObj | undefined) =>
  c?.status?.conditions?.some((x) => x.type === 'Ready' && x.status === 'True') ?? false;

export function template(ns: string, name: string): TemplateObj {
  return {
    apiVersion: 'extensions.agents.x-k8s.io/v1beta1',
    kind: 'SandboxTemplate',
    metadata: { name, namespace: ns },
    spec: {
      podTemplate: {
        metadata: { labels: { app: 'bench' } },
        spec: { containers: [{ name: 'main', image: 'registry.k8s.io/pause:3.10' }] },
      },
    },
  };
}

export function pool(ns: string, name: string, tpl: string, replicas: number): PoolObj {
  return {
    apiVersion: 'extensions.agents.x-k8s.io/v1beta1',
    kind: 'SandboxWarmPool',
    metadata: { name, namespace: ns },
    spec: { replicas, sandboxTemplateRef: { name: tpl } },
  };
}

export function claim(ns: string, name: string, poolName: string): ClaimObj {
  return {
    apiVersion: 'extensions.agents.x-k8s.io/v1beta1',
    kind: 'SandboxClaim',
    metadata: { name, namespace: ns, labels: { 'agents.x-k8s.io/created-by': 'loadgen' } },
    spec: { warmPoolRef: { name: poolName } },
  };
}

export async function setupPool(c: KubeClient, ns: string, replicas: number, poolName = 'pool'): Promise<void> {
  await c.create(SandboxTemplates, template(ns, 'tpl'));
  await c.create(SandboxWarmPools, pool(ns, poolName, 'tpl', replicas));
}

export async function waitPool(
  c: KubeClient,
  ns: string,
  name: string,
  ready: number,
  timeoutMs: number,
  progress?: (s: string) => void,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = -1;
  for (;;) {
    const p = await c.get<PoolObj>(SandboxWarmPools, ns, name);
    const r = p.status?.readyReplicas ?? 0;
    if (r !== last) progress?.(`pool ${name}: ${r}/${ready} ready`);
    last = r;
    if (r >= ready && (p.status?.replicas ?? 0) >= ready) return;
    if (Date.now() > deadline) throw new Error(`pool ${name} reached ${r}/${ready} ready in ${timeoutMs} ms`);
    await sleep(500);
  }
}

/** A resumable watch (re-opened from the last resourceVersion until stopped). */
export function watchAll<T extends { metadata: { resourceVersion?: string } }>(
  c: KubeClient,
  rt: ResourceType,
  ns: string,
  fromRv: string,
  onEvent: (type: string, obj: T) => void,
  signal: AbortSignal,
): Promise<void> {
  return (async () => {
    let rv = fromRv;
    while (!signal.aborted) {
      try {
        await c.watch<T>(
          rt,
          ns,
          { resourceVersion: rv, allowWatchBookmarks: true, timeoutSeconds: 240 },
          (ev) => {
            if (ev.object.metadata?.resourceVersion) rv = ev.object.metadata.resourceVersion;
            if (ev.type !== 'BOOKMARK') onEvent(ev.type, ev.object);
          },
          signal,
        );
      } catch (err) {
        if (signal.aborted) return;
        process.stderr.write(`watch ${rt.plural} restarting: ${(err as Error).message}\n`);
        await sleep(200);
      }
    }
  })();
}

/** Resolves per-claim "Ready observed" waiters from one shared watch, stamping the time the event arrived. */
export class ReadyWaiter {
  private readonly waiters = new Map<string, (t: number) => void>();
  private readonly readyAt = new Map<string, number>();
  onEvent = (_type: string, c: ClaimObj): void => {
    const name = c.metadata.name!;
    if (!isClaimReady(c) || this.readyAt.has(name)) return;
    const t = performance.now();
    this.readyAt.set(name, t);
    this.waiters.get(name)?.(t);
    this.waiters.delete(name);
  };
  /** Time (performance.now()) the claim was first observed Ready, or undefined on timeout. */
  wait(name: string, timeoutMs: number): Promise<number | undefined> {
    const t = this.readyAt.get(name);
    if (t !== undefined) return Promise.resolve(t);
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.waiters.delete(name);
        resolve(undefined);
      }, timeoutMs);
      this.waiters.set(name, (at) => {
        clearTimeout(timer);
        resolve(at);
      });
    });
  }
  forget(name: string): void {
    this.readyAt.delete(name);
  }
}

/**
 * The exclusivity invariants, checked on every watch event of the run:
 * - a Sandbox (by UID) is never controlled by two different claims over its life;
 * - a claim (by UID) never controls two Sandboxes;
 * - a claim's `status.sandbox.name` never changes once set.
 */
export class InvariantWatcher {
  readonly violations: string[] = [];
  private readonly sandboxOwner = new Map<string, string>();
  private readonly claimSandboxes = new Map<string, Map<string, string>>();
  private readonly claimBinding = new Map<string, string>();
  events = 0;

  onSandbox = (_type: string, sb: SandboxObj): void => {
    this.events++;
    const ref = controllerOf(sb);
    if (ref?.kind !== 'SandboxClaim') return;
    const uid = sb.metadata.uid!;
    const prev = this.sandboxOwner.get(uid);
    if (prev && prev !== ref.uid)
      this.violations.push(`Sandbox ${sb.metadata.name} owned by claim ${prev} and then by ${ref.uid}`);
    this.sandboxOwner.set(uid, ref.uid);
    let seen = this.claimSandboxes.get(ref.uid);
    if (!seen) this.claimSandboxes.set(ref.uid, (seen = new Map()));
    if (!seen.has(uid)) {
      seen.set(uid, `${sb.metadata.name}@${new Date().toISOString()}`);
      if (seen.size > 1)
        this.violations.push(
          `claim ${ref.name} (${ref.uid}) controls ${seen.size} Sandboxes: ${[...seen.values()].join(', ')}`,
        );
    }
  };

  onClaim = (_type: string, c: ClaimObj): void => {
    this.events++;
    const name = c.status?.sandbox?.name;
    if (!name) return;
    const prev = this.claimBinding.get(c.metadata.uid!);
    if (prev && prev !== name) this.violations.push(`claim ${c.metadata.name} moved from Sandbox ${prev} to ${name}`);
    this.claimBinding.set(c.metadata.uid!, name);
  };

  get boundClaims(): number {
    return this.claimBinding.size;
  }
}

/** The operator as a child process, scoped to one namespace (so it can be SIGKILLed and restarted). */
export class OperatorProcess {
  private child: ChildProcess | undefined;
  private exit: Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }> | undefined;
  starts = 0;
  constructor(
    private readonly kubeconfig: string,
    /** Scope to one namespace; undefined watches all. */
    private readonly namespace: string | undefined,
    private readonly extraArgs: string[] = [],
  ) {}

  start(): void {
    this.starts++;
    this.child = spawn(
      process.execPath,
      [
        `${ROOT}bin/sandbox-operator.mjs`,
        `--kubeconfig=${this.kubeconfig}`,
        ...(this.namespace ? [`--namespace=${this.namespace}`] : []),
        '--leader-elect=false',
        '--metrics-bind-address=0',
        '--health-probe-bind-address=0',
        '--enable-webhook=false',
        '--manage-webhook-certs=false',
        '--kube-api-qps=-1',
        '--zap-log-level=error',
        ...this.extraArgs,
      ],
      { stdio: ['ignore', 'ignore', 'inherit'], cwd: ROOT },
    );
    const c = this.child;
    this.exit = new Promise((r) => c.once('exit', (code, signal) => r({ code, signal, at: Date.now() })));
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  get running(): boolean {
    return this.child !== undefined && this.child.exitCode === null && this.child.signalCode === null;
  }

  /** How and when (Date.now()) the current child exited; undefined if it is still running after `timeoutMs`. */
  async exited(
    timeoutMs: number,
  ): Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number } | undefined> {
    if (!this.exit) return undefined;
    const timer = new AbortController();
    const timeout = sleep(timeoutMs, undefined, { signal: timer.signal }).then(
      () => undefined,
      () => undefined,
    );
    try {
      return await Promise.race([this.exit, timeout]);
    } finally {
      timer.abort();
    }
  }

  /** CPU time the operator process has used so far (all threads), in ms. */
  cpuMs(): number {
    const pid = this.child?.pid;
    try {
      return pid === undefined ? NaN : processCpuMs(pid);
    } catch {
      return NaN; // exited
    }
  }

  async kill(signal: NodeJS.Signals): Promise<void> {
    const c = this.child;
    if (!c || c.exitCode !== null || c.signalCode !== null) return;
    const exited = new Promise((r) => c.once('exit', r));
    c.kill(signal);
    await exited;
    this.child = undefined;
  }
}

export function percentile(sorted: number[], p: number): number {
  if (!sorted.length) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

export { SandboxClaims, Sandboxes };
