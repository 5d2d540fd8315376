/**
 * A fire-and-forget events.k8s.io/v1 recorder, shared by sandbox-operator's controllers, sandbox-apiserver's
 * lifecycle verbs and sandboxd's claim gateway: an Event is one create sent off the caller's path, so recording
 * never blocks, slows or fails the reconcile or request that caused it. Bounded: at most `maxInFlight` creates at a
 * time and `maxQueued` waiting; past that an Event is dropped and counted (`sandbox_events_total{result="dropped"}`),
 * as client-go's broadcaster drops on a full channel, rather than holding memory while kube-apiserver is slow.
 * Deduplication is the caller's (each records on a transition or a verb, not on every pass).
 */
import { hostname } from 'node:os';
import { Counter, type Registry } from 'prom-client';
import type { ObjectMeta } from '../api/meta.js';
import type { KubeClient } from './client.js';
import { EventsV1, type ResourceType } from './resource.js';

let sequence = 0;

/**
 * The Event's name, as client-go's recorder makes it: `<object>.<hex nanoseconds>`, unique per recorder (a sequence
 * breaks ties within a millisecond) and cut to fit the 253 characters of an object name. Not `generateName:
 * "<object>."`: the apiserver validates generateName as a name, and one ending in `.` is refused.
 */
export function eventName(objectName: string, now = Date.now()): string {
  const suffix = (BigInt(now) * 1_000_000n + BigInt(sequence++ % 1_000_000)).toString(16);
  return `${objectName.slice(0, 253 - suffix.length - 1).replace(/[.-]+$/, '')}.${suffix}`;
}

/** metav1.MicroTime wants exactly six fractional digits. */
export function microTime(d = new Date()): string {
  return d.toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');
}

export interface EventSpec {
  type: 'Normal' | 'Warning';
  reason: string;
  action: string;
  note: string;
}

/** The object an Event is about (events.k8s.io/v1 `regarding`). */
export interface EventRegarding {
  apiVersion: string;
  kind: string;
  namespace: string;
  name: string;
  uid?: string;
}

export interface EventRecorderOptions {
  /** `reportingController`; also the `reportingInstance` prefix (`<controller>-<hostname>`). */
  controller: string;
  /** The process's metrics registry: `sandbox_events_total{controller,result}` is registered there once. */
  registry?: Registry;
  /** Creates in flight at once (default 8). */
  maxInFlight?: number;
  /** Events waiting to be sent (default 1000); past it new ones are dropped and counted. */
  maxQueued?: number;
  /** Bound on one create (default 10 s): a hung kube-apiserver cannot hold a slot for ever. */
  timeoutMs?: number;
}

/** The structured logger's shape this needs (pino's, the project's Logger). */
interface DebugLogger {
  debug(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

const countersFor = new WeakMap<Registry, Counter<'controller' | 'result'>>();
function eventCounter(registry: Registry | undefined): Counter<'controller' | 'result'> | undefined {
  if (!registry) return undefined;
  let c = countersFor.get(registry);
  if (!c) {
    c = new Counter({
      name: 'sandbox_events_total',
      help: 'Kubernetes Events this process tried to record, by reporting controller and result (recorded, failed, dropped: the backlog was full)',
      labelNames: ['controller', 'result'],
      registers: [registry],
    });
    countersFor.set(registry, c);
  }
  return c;
}

/** Records Events without blocking the caller; failures are logged at debug and counted. */
export class EventRecorder {
  readonly stats = { recorded: 0, failed: 0, dropped: 0 };
  private readonly controller: string;
  private readonly instance: string;
  private readonly maxInFlight: number;
  private readonly maxQueued: number;
  private readonly timeoutMs: number;
  private readonly counter: Counter<'controller' | 'result'> | undefined;
  private readonly queue: object[] = [];
  private inFlight = 0;
  private droppedSinceWarn = 0;
  private scheduled = false;

  constructor(
    private readonly client: KubeClient,
    private readonly log: DebugLogger,
    opts: EventRecorderOptions,
  ) {
    this.controller = opts.controller;
    this.instance = `${opts.controller}-${hostname()}`;
    this.maxInFlight = opts.maxInFlight ?? 8;
    this.maxQueued = opts.maxQueued ?? 1000;
    this.timeoutMs = opts.timeoutMs ?? 10_000;
    this.counter = eventCounter(opts.registry);
  }

  /** An Event about a typed object (its ResourceType gives apiVersion and kind). */
  record(regarding: { metadata: ObjectMeta }, rt: ResourceType, ev: EventSpec): void {
    const { name, namespace, uid } = regarding.metadata;
    if (!name || !namespace) return;
    this.recordFor(
      { apiVersion: rt.group ? `${rt.group}/${rt.version}` : rt.version, kind: rt.kind, name, namespace, uid },
      ev,
    );
  }

  /** An Event about an object named by reference (one this process serves rather than reads from the API). */
  recordFor(regarding: EventRegarding, ev: EventSpec): void {
    const { name, namespace } = regarding;
    if (!name || !namespace) return;
    if (this.queue.length >= this.maxQueued) return this.drop(ev.reason);
    const body = {
      apiVersion: 'events.k8s.io/v1',
      kind: 'Event',
      metadata: { name: eventName(name), namespace },
      eventTime: microTime(),
      reportingController: this.controller,
      reportingInstance: this.instance.slice(0, 128),
      action: ev.action.slice(0, 128),
      reason: ev.reason.slice(0, 128),
      // The apiserver refuses a note past 1 kB; an error message quoted in one can be longer.
      note: ev.note.length > 1024 ? `${ev.note.slice(0, 1021)}...` : ev.note,
      type: ev.type,
      regarding,
    };
    this.queue.push(body);
    // Sent after the caller's tick: not even the request's start is on the path of the answer that caused it.
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      this.pump();
    });
  }

  private drop(reason: string): void {
    this.stats.dropped++;
    this.counter?.inc({ controller: this.controller, result: 'dropped' });
    // One warning per burst, not one per dropped Event: the log must not become the next backlog.
    if (this.droppedSinceWarn++ === 0)
      this.log.warn(
        { reason, queued: this.queue.length },
        'events backlog full: dropping Events until kube-apiserver catches up',
      );
  }

  private pump(): void {
    while (this.inFlight < this.maxInFlight && this.queue.length) {
      const body = this.queue.shift() as { metadata: ObjectMeta; reason: string };
      this.inFlight++;
      this.client
        .create(EventsV1, body, { signal: AbortSignal.timeout(this.timeoutMs) })
        .then(
          () => {
            this.stats.recorded++;
            this.counter?.inc({ controller: this.controller, result: 'recorded' });
          },
          (err: unknown) => {
            this.stats.failed++;
            this.counter?.inc({ controller: this.controller, result: 'failed' });
            this.log.debug({ err, reason: body.reason }, 'event not recorded');
          },
        )
        .finally(() => {
          this.inFlight--;
          if (this.queue.length === 0) this.droppedSinceWarn = 0;
          this.pump();
        });
    }
  }

  /** Resolves once nothing is queued or in flight (tests; a graceful stop). */
  async idle(): Promise<void> {
    while (this.inFlight || this.queue.length || this.scheduled) await new Promise((r) => setTimeout(r, 10));
  }
}
