import { Counter, Gauge, Histogram, type Registry } from 'prom-client';

/**
 * A de-duplicating, rate-limited work queue with client-go semantics: a key is queued at most once, is never
 * processed by two workers at once, and a key added while being processed is re-queued when `done` is called.
 */
export interface WorkQueueOptions {
  name: string;
  baseDelayMs?: number;
  maxDelayMs?: number;
  registry?: Registry;
}

const metricsFor = new WeakMap<Registry, ReturnType<typeof makeMetrics>>();
function makeMetrics(registry: Registry) {
  return {
    depth: new Gauge({
      name: 'workqueue_depth',
      help: 'Current depth of the workqueue',
      labelNames: ['name'],
      registers: [registry],
    }),
    adds: new Counter({
      name: 'workqueue_adds_total',
      help: 'Adds handled by the workqueue',
      labelNames: ['name'],
      registers: [registry],
    }),
    retries: new Counter({
      name: 'workqueue_retries_total',
      help: 'Rate-limited retries',
      labelNames: ['name'],
      registers: [registry],
    }),
    latency: new Histogram({
      name: 'workqueue_queue_duration_seconds',
      help: 'How long an item stays in the workqueue before being requested',
      labelNames: ['name'],
      buckets: [0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10],
      registers: [registry],
    }),
  };
}

export class WorkQueue {
  private readonly queue: string[] = [];
  private head = 0;
  private readonly dirty = new Set<string>();
  private readonly processing = new Set<string>();
  private readonly addedAt = new Map<string, number>();
  private readonly failures = new Map<string, number>();
  private readonly timers = new Map<string, { at: number; timer: NodeJS.Timeout }>();
  private waiters: Array<(key: string | undefined) => void> = [];
  private shuttingDown = false;
  private readonly metrics: ReturnType<typeof makeMetrics> | undefined;

  constructor(private readonly opts: WorkQueueOptions) {
    if (opts.registry) {
      let m = metricsFor.get(opts.registry);
      if (!m) metricsFor.set(opts.registry, (m = makeMetrics(opts.registry)));
      this.metrics = m;
    }
  }

  get length(): number {
    return this.queue.length - this.head;
  }

  add(key: string): void {
    if (this.shuttingDown || this.dirty.has(key)) return;
    this.metrics?.adds.inc({ name: this.opts.name });
    this.dirty.add(key);
    if (!this.addedAt.has(key)) this.addedAt.set(key, performance.now());
    if (this.processing.has(key)) return;
    const waiter = this.waiters.shift();
    if (waiter) {
      this.dirty.delete(key);
      this.processing.add(key);
      this.observeLatency(key);
      waiter(key);
      return;
    }
    this.queue.push(key);
    this.metrics?.depth.set({ name: this.opts.name }, this.length);
  }

  /** Add after a delay; an earlier pending delay for the same key wins. */
  addAfter(key: string, delayMs: number): void {
    if (this.shuttingDown) return;
    if (delayMs <= 0) return this.add(key);
    const at = Date.now() + delayMs;
    const existing = this.timers.get(key);
    if (existing && existing.at <= at) return;
    if (existing) clearTimeout(existing.timer);
    const timer = setTimeout(() => {
      this.timers.delete(key);
      this.add(key);
    }, delayMs);
    timer.unref?.();
    this.timers.set(key, { at, timer });
  }

  addRateLimited(key: string): void {
    const n = this.failures.get(key) ?? 0;
    this.failures.set(key, n + 1);
    this.metrics?.retries.inc({ name: this.opts.name });
    const delay = Math.min((this.opts.baseDelayMs ?? 5) * 2 ** n, this.opts.maxDelayMs ?? 300_000);
    this.addAfter(key, delay);
  }

  forget(key: string): void {
    this.failures.delete(key);
  }

  retries(key: string): number {
    return this.failures.get(key) ?? 0;
  }

  /** Next key to process, or undefined once shut down. */
  get(): Promise<string | undefined> {
    if (this.head < this.queue.length) {
      const key = this.queue[this.head++]!;
      if (this.head > 1024 && this.head * 2 > this.queue.length) {
        this.queue.splice(0, this.head);
        this.head = 0;
      }
      this.dirty.delete(key);
      this.processing.add(key);
      this.observeLatency(key);
      this.metrics?.depth.set({ name: this.opts.name }, this.length);
      return Promise.resolve(key);
    }
    if (this.shuttingDown) return Promise.resolve(undefined);
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  done(key: string): void {
    this.processing.delete(key);
    if (this.dirty.has(key)) {
      this.dirty.delete(key);
      this.add(key);
    }
  }

  shutdown(): void {
    this.shuttingDown = true;
    for (const { timer } of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
    for (const w of this.waiters) w(undefined);
    this.waiters = [];
  }

  private observeLatency(key: string) {
    const t = this.addedAt.get(key);
    this.addedAt.delete(key);
    if (t !== undefined) this.metrics?.latency.observe({ name: this.opts.name }, (performance.now() - t) / 1000);
  }
}
