import { deadline } from '../abort.js';
import { randomUUID } from 'node:crypto';
import { Counter, Histogram, type Registry } from 'prom-client';
import { SandboxError } from '../errors.js';
import { silentLogger, type Logger } from '../log/logger.js';
import type { Informer } from './informer.js';
import { keyOf, splitKey, type KubeObject } from './resource.js';
import { isConflict } from './status-errors.js';
import { WorkQueue } from './workqueue.js';

/**
 * Level-triggered reconcilers, as controller-runtime has them: a reconcile gets only a key, reads the world
 * from caches, and returns when to look again. Only runReconcile turns (result, error) into queue operations.
 */

export interface ReconcileRequest {
  key: string;
  namespace: string | undefined;
  name: string;
}

export interface ReconcileResult {
  requeueAfterMs?: number;
}

export interface ReconcileContext {
  log: Logger;
  signal: AbortSignal;
}

export type Reconciler = (req: ReconcileRequest, ctx: ReconcileContext) => Promise<ReconcileResult | void>;

/** An error that retrying cannot fix; the reconciler should have recorded it in a condition. */
export class TerminalError extends SandboxError {
  constructor(message: string, options: { cause?: unknown } = {}) {
    super('controller.terminal', message, options);
    this.name = 'TerminalError';
  }
}

export type Predicate<T> = (oldObj: T | undefined, newObj: T) => boolean;

const metricsFor = new WeakMap<Registry, ReturnType<typeof makeMetrics>>();
function makeMetrics(registry: Registry) {
  return {
    total: new Counter({
      name: 'controller_runtime_reconcile_total',
      help: 'Reconciles per controller and result',
      labelNames: ['controller', 'result'],
      registers: [registry],
    }),
    errors: new Counter({
      name: 'controller_runtime_reconcile_errors_total',
      help: 'Reconcile errors',
      labelNames: ['controller'],
      registers: [registry],
    }),
    duration: new Histogram({
      name: 'controller_runtime_reconcile_time_seconds',
      help: 'Reconcile duration',
      labelNames: ['controller'],
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers: [registry],
    }),
  };
}

export interface ControllerOptions {
  name: string;
  workers: number;
  reconcile: Reconciler;
  logger?: Logger;
  registry?: Registry;
  /** Per-reconcile time limit (aborts ctx.signal). */
  timeoutMs?: number;
}

export class Controller {
  readonly queue: WorkQueue;
  private readonly log: Logger;
  private readonly metrics: ReturnType<typeof makeMetrics> | undefined;

  constructor(private readonly opts: ControllerOptions) {
    this.queue = new WorkQueue({ name: opts.name, registry: opts.registry });
    this.log = (opts.logger ?? silentLogger).child({ controller: opts.name });
    if (opts.registry) {
      let m = metricsFor.get(opts.registry);
      if (!m) metricsFor.set(opts.registry, (m = makeMetrics(opts.registry)));
      this.metrics = m;
    }
  }

  get name(): string {
    return this.opts.name;
  }

  enqueue(key: string): void {
    this.queue.add(key);
  }

  enqueueAfter(key: string, ms: number): void {
    this.queue.addAfter(key, ms);
  }

  /** Reconcile objects of the primary kind: their own key. */
  for<T extends KubeObject>(informer: Informer<T>, predicate?: Predicate<T>): this {
    return this.watches(informer, (obj) => [keyOf(obj)], predicate);
  }

  /** Reconcile the controller owner (of `ownerKind`) of objects of a dependent kind. */
  owns<T extends KubeObject>(
    informer: Informer<T>,
    ownerKind: string,
    ownerGroup: string,
    predicate?: Predicate<T>,
  ): this {
    return this.watches(
      informer,
      (obj) => {
        const ref = obj.metadata.ownerReferences?.find((r) => r.controller);
        if (!ref || ref.kind !== ownerKind || !ref.apiVersion.startsWith(ownerGroup ? `${ownerGroup}/` : 'v'))
          return [];
        return [obj.metadata.namespace ? `${obj.metadata.namespace}/${ref.name}` : ref.name];
      },
      predicate,
    );
  }

  /** Reconcile whatever keys `map` derives from events of another kind. */
  watches<T extends KubeObject>(informer: Informer<T>, map: (obj: T) => string[], predicate?: Predicate<T>): this {
    informer.addHandler({
      onAdd: (obj) => {
        if (!predicate || predicate(undefined, obj)) for (const k of map(obj)) this.queue.add(k);
      },
      onUpdate: (oldObj, newObj) => {
        if (predicate && !predicate(oldObj, newObj)) return;
        const keys = new Set([...map(oldObj), ...map(newObj)]);
        for (const k of keys) this.queue.add(k);
      },
      onDelete: (obj) => {
        for (const k of map(obj)) this.queue.add(k);
      },
    });
    return this;
  }

  async run(signal: AbortSignal): Promise<void> {
    const onAbort = () => this.queue.shutdown();
    signal.addEventListener('abort', onAbort, { once: true });
    this.log.info({ workers: this.opts.workers }, 'starting workers');
    await Promise.all(Array.from({ length: this.opts.workers }, () => this.worker(signal)));
  }

  private async worker(signal: AbortSignal): Promise<void> {
    for (;;) {
      const key = await this.queue.get();
      if (key === undefined) return;
      try {
        await this.runReconcile(key, signal);
      } finally {
        this.queue.done(key);
      }
    }
  }

  private async runReconcile(key: string, signal: AbortSignal): Promise<void> {
    const { namespace, name } = splitKey(key);
    const reconcileID = randomUUID();
    const log = this.log.child({ key, reconcileID });
    const started = performance.now();
    const timeout = this.opts.timeoutMs ? deadline(this.opts.timeoutMs, signal) : undefined;
    let result: ReconcileResult | void;
    try {
      result = await this.opts.reconcile({ key, namespace, name }, { log, signal: timeout?.signal ?? signal });
      timeout?.clear();
    } catch (err) {
      timeout?.clear();
      this.metrics?.duration.observe({ controller: this.name }, (performance.now() - started) / 1000);
      if (err instanceof TerminalError) {
        this.metrics?.total.inc({ controller: this.name, result: 'terminal_error' });
        log.error({ err }, 'reconcile failed permanently');
        this.queue.forget(key);
        return;
      }
      this.metrics?.total.inc({ controller: this.name, result: 'error' });
      this.metrics?.errors.inc({ controller: this.name });
      // Conflicts are expected under optimistic concurrency: retry quietly.
      if (isConflict(err)) log.debug({ err }, 'conflict; retrying');
      else log.warn({ err }, 'reconcile failed; retrying with backoff');
      this.queue.addRateLimited(key);
      return;
    }
    this.metrics?.duration.observe({ controller: this.name }, (performance.now() - started) / 1000);
    if (result?.requeueAfterMs !== undefined) {
      this.metrics?.total.inc({ controller: this.name, result: 'requeue_after' });
      this.queue.forget(key);
      this.queue.addAfter(key, result.requeueAfterMs);
      return;
    }
    this.metrics?.total.inc({ controller: this.name, result: 'success' });
    this.queue.forget(key);
  }
}
