import { readFileSync } from 'node:fs';
import { Counter, Histogram, type Registry } from 'prom-client';
import { silentLogger, type Logger } from '../log/logger.js';
import { pidCpuMs } from '../vmm/process.js';
import type { MicrovmHandle } from '../vmm/index.js';
import type { SandboxRecord } from './claims.js';

/**
 * Idle suspend with transparent resume (docs/sandboxd.md "Idle suspend"): a claim made with an idle policy
 * (`idle_hibernate_seconds`) is hibernated once nothing has used it for that long, and woken by the next request
 * that would use it, which then waits for the wake instead of failing. A hibernated sandbox holds disk, not RAM and
 * not one of the node's running slots (`--max-claims`), so a node keeps far more suspended sandboxes than running
 * ones.
 *
 * What counts as use, and why each:
 * - A request through the node for the sandbox: an exec (sandboxd API, `kubectl exec`/attach through the virtual
 *   kubelet), a port-forward, an envd request (e2b's data plane and its guest ports). These are the callers who would
 *   see an error if the VM were gone, so each one restarts the clock (touch()).
 * - A session still open (an exec stream, a port-forward, an envd stream) keeps it awake however quiet (hold()): a
 *   hibernate would cut it, and a cut connection is an error, not latency.
 * - Traffic on the VM's NIC: traffic to the pod IP (Services, upstream's in-cluster modes) reaches the VM without
 *   passing the node's proxies, so the VM's own packet counters are read (its QEMU runs in the VM's network
 *   namespace: /proc/<pid>/net/dev). More than IDLE_PACKETS packets in a window is use; a guest alone sends a few
 *   (ARP, NDP) now and then.
 * - Guest CPU: a guest computing with nobody attached (a build, a training step) is working for someone. More than
 *   `cpuPercent` of one host core over a window (the QEMU process's user+system time) is use. An idle guest under TCG
 *   measured 0.0 % over 2 s (test/sandboxd/idle-suspend.test.ts prints it; docs/sandboxd.md "Idle suspend").
 *
 * A daemon restart starts every clock again (idle time is not persisted: a sandbox is never suspended for time the
 * node did not watch it).
 */

/** A quiet guest sends a few packets a window (ARP and NDP refreshes); more than this is traffic. */
export const IDLE_PACKETS = 8;
/** The default of `--idle-cpu-percent`. */
export const DEFAULT_IDLE_CPU_PERCENT = 10;
/** The longest sample window: CPU and packets are compared across at most this much time. */
const MAX_WINDOW_MS = 5000;

/** What the idle watcher needs of the node's engine. */
export interface IdleEngine {
  list(): SandboxRecord[];
  get(id: string): SandboxRecord | undefined;
  vmOf(rec: SandboxRecord): MicrovmHandle | undefined;
  hibernate(id: string, reason?: 'idle'): Promise<void>;
  wake(id: string): Promise<void>;
  on(event: 'released', listener: (rec: SandboxRecord) => void): unknown;
}

export interface IdleOptions {
  cpuPercent?: number;
  logger?: Logger;
  /** Packet counters of a VM (tests); default: /proc/<pid>/net/dev of its QEMU. */
  packets?: (vm: MicrovmHandle) => number | undefined;
  /** CPU time of a VM's VMM in ms (tests); default: /proc/<pid>/stat. */
  cpuMs?: (vm: MicrovmHandle) => number | undefined;
}

interface Sample {
  at: number;
  cpuMs?: number;
  packets?: number;
  /** Whether the window that ended at `at` showed neither CPU nor traffic (false for the first sample). */
  quiet: boolean;
}

/** Packets in and out of every interface but `lo` in the network namespace of `pid`. */
export function netnsPackets(pid: number): number | undefined {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/net/dev`, 'utf8');
  } catch {
    return undefined;
  }
  let total = 0;
  for (const line of text.split('\n').slice(2)) {
    const [name, rest] = line.split(':');
    if (!rest || name!.trim() === 'lo') continue;
    const f = rest.trim().split(/\s+/).map(Number);
    total += (f[1] ?? 0) + (f[9] ?? 0); // receive packets, transmit packets
  }
  return total;
}

export class IdleSuspender {
  private readonly lastActive = new Map<string, number>();
  private readonly holds = new Map<string, number>();
  private readonly samples = new Map<string, Sample>();
  private readonly suspending = new Map<string, Promise<void>>();
  private readonly waking = new Map<string, Promise<void>>();
  private readonly log: Logger;
  private readonly cpuPercent: number;
  private sweeping = false;
  private metrics: { suspends: Counter<'result'>; wakes: Counter<'result'>; wakeSeconds: Histogram } | undefined;
  readonly counters = { suspended: 0, woken: 0, suspendFailures: 0, wakeFailures: 0 };

  constructor(
    private readonly engine: IdleEngine,
    private readonly opts: IdleOptions = {},
  ) {
    this.log = opts.logger ?? silentLogger;
    this.cpuPercent = opts.cpuPercent ?? DEFAULT_IDLE_CPU_PERCENT;
    engine.on('released', (rec) => this.forget(rec.id));
  }

  register(registry: Registry): void {
    const registers = [registry];
    this.metrics = {
      suspends: new Counter({
        name: 'sandboxd_idle_suspends_total',
        help: 'Sandboxes hibernated by their idle policy, by result (ok|failed)',
        labelNames: ['result'],
        registers,
      }),
      wakes: new Counter({
        name: 'sandboxd_idle_wakes_total',
        help: 'Idle-suspended sandboxes woken by a request, by result (ok|failed)',
        labelNames: ['result'],
        registers,
      }),
      wakeSeconds: new Histogram({
        name: 'sandboxd_idle_wake_seconds',
        help: 'How long a request waited for its idle-suspended sandbox to wake',
        buckets: [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10],
        registers,
      }),
    };
  }

  /** The sandbox was used now (module comment: what counts). */
  touch(id: string): void {
    this.lastActive.set(id, Date.now());
  }

  /** A session opened on the sandbox: it stays awake until the returned function is called (once). */
  hold(id: string): () => void {
    this.holds.set(id, (this.holds.get(id) ?? 0) + 1);
    this.touch(id);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      const n = (this.holds.get(id) ?? 1) - 1;
      if (n > 0) this.holds.set(id, n);
      else this.holds.delete(id);
      this.touch(id);
    };
  }

  /** How long the sandbox has been idle, as this node saw it (0 while a session is open). */
  idleMs(id: string, now = Date.now()): number {
    if (this.holds.get(id)) return 0;
    const last = this.lastActive.get(id);
    return last === undefined ? 0 : Math.max(0, now - last);
  }

  private forget(id: string): void {
    this.lastActive.delete(id);
    this.holds.delete(id);
    this.samples.delete(id);
  }

  /**
   * A request is about to use sandbox `id`: count it as use, wait for a suspend of it in progress, and wake it if its
   * idle policy suspended it. Sandboxes a caller paused or hibernated are left as they are (the caller answers as
   * before). Concurrent callers share one wake. True when this call waited for a wake.
   */
  async ensureAwake(id: string): Promise<boolean> {
    this.touch(id);
    const suspending = this.suspending.get(id);
    if (suspending) await suspending;
    const rec = this.engine.get(id);
    if (!rec?.hibernated || !rec.idleSuspended) return false;
    let wake = this.waking.get(id);
    if (!wake) {
      const t0 = performance.now();
      wake = this.engine
        .wake(id)
        .then(
          () => {
            const seconds = (performance.now() - t0) / 1000;
            this.counters.woken++;
            this.metrics?.wakes.inc({ result: 'ok' });
            this.metrics?.wakeSeconds.observe(seconds);
            this.log.info({ sandbox: id, ms: Math.round(seconds * 1000) }, 'idle-suspended sandbox woken by a request');
          },
          (err: unknown) => {
            this.counters.wakeFailures++;
            this.metrics?.wakes.inc({ result: 'failed' });
            this.log.warn({ err, sandbox: id }, 'could not wake an idle-suspended sandbox for a request');
            throw err;
          },
        )
        .finally(() => this.waking.delete(id));
      this.waking.set(id, wake);
    }
    await wake;
    this.touch(id);
    return true;
  }

  /** One look at every claim with an idle policy (the engine's 1 s tick); suspends those idle long enough. */
  async sweep(now = Date.now()): Promise<void> {
    if (this.sweeping) return;
    this.sweeping = true;
    try {
      for (const rec of this.engine.list()) {
        const seconds = rec.idleHibernateSeconds;
        if (!seconds || rec.hibernated || rec.paused || this.suspending.has(rec.id) || this.waking.has(rec.id)) {
          this.samples.delete(rec.id);
          continue;
        }
        // First sight (a new claim, a wake, a restarted daemon): the clock starts now.
        if (!this.lastActive.has(rec.id)) this.lastActive.set(rec.id, now);
        const windowMs = Math.min(MAX_WINDOW_MS, Math.max(1000, (seconds * 1000) / 2));
        const quiet = this.sample(rec, now, windowMs);
        if (quiet && this.idleMs(rec.id, now) >= seconds * 1000) await this.suspend(rec, seconds);
      }
    } finally {
      this.sweeping = false;
    }
  }

  /**
   * Take a CPU and packet sample when the last is a window old, and count a busy window as use. True when the last
   * full window was quiet (there was one, and it showed neither); a busy one restarts the idle clock, so "idle for N
   * seconds" also means no busy window ended in them.
   */
  private sample(rec: SandboxRecord, now: number, windowMs: number): boolean {
    const vm = this.engine.vmOf(rec);
    if (!vm) return false;
    const prev = this.samples.get(rec.id);
    if (prev && now - prev.at < windowMs) return prev.quiet;
    const cur: Sample = { at: now, cpuMs: this.cpuOf(vm), packets: this.packetsOf(vm), quiet: false };
    this.samples.set(rec.id, cur);
    if (!prev) return false;
    const ms = now - prev.at;
    const cpu = cur.cpuMs !== undefined && prev.cpuMs !== undefined ? ((cur.cpuMs - prev.cpuMs) / ms) * 100 : 0;
    const packets = cur.packets !== undefined && prev.packets !== undefined ? cur.packets - prev.packets : 0;
    if (cpu > this.cpuPercent || packets > IDLE_PACKETS) {
      this.log.debug({ sandbox: rec.id, cpuPercent: Math.round(cpu), packets }, 'sandbox busy: idle clock restarted');
      this.lastActive.set(rec.id, now);
      return false;
    }
    cur.quiet = true;
    return true;
  }

  private cpuOf(vm: MicrovmHandle): number | undefined {
    if (this.opts.cpuMs) return this.opts.cpuMs(vm);
    return vm.pid === undefined ? undefined : pidCpuMs(vm.pid);
  }

  private packetsOf(vm: MicrovmHandle): number | undefined {
    if (this.opts.packets) return this.opts.packets(vm);
    // Only a VM in its own network namespace: another VMM's /proc/<pid>/net/dev is the host's, not the VM's.
    return vm.pid === undefined || !vm.record.netns ? undefined : netnsPackets(vm.pid);
  }

  private async suspend(rec: SandboxRecord, seconds: number): Promise<void> {
    const id = rec.id;
    const p = this.engine.hibernate(id, 'idle').then(
      () => {
        this.counters.suspended++;
        this.metrics?.suspends.inc({ result: 'ok' });
        this.log.info({ sandbox: id, claimRef: rec.claimRef, idleSeconds: seconds }, 'idle sandbox hibernated');
      },
      (err: unknown) => {
        // Not again at the next tick: the clock starts over, so a VM that cannot hibernate is retried a policy later.
        this.counters.suspendFailures++;
        this.metrics?.suspends.inc({ result: 'failed' });
        this.touch(id);
        if (this.engine.get(id) === rec) this.log.warn({ err, sandbox: id }, 'could not hibernate an idle sandbox');
      },
    );
    this.suspending.set(id, p);
    try {
      await p;
    } finally {
      this.suspending.delete(id);
      this.samples.delete(id);
    }
  }
}
