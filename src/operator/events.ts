/**
 * A fire-and-forget events.k8s.io/v1 recorder, shared by the Sandbox controller and the extension controllers: an
 * event is one create sent off the reconcile's path, so recording never blocks or fails the pass that caused it.
 * Deduplication is the caller's (each records on a transition it detects, not on every pass).
 */
import { hostname } from 'node:os';
import { EventsV1, type KubeClient, type ObjectMeta, type ResourceType } from '../kube/index.js';
import type { Logger } from '../log/logger.js';

export const REPORTING_CONTROLLER = 'sandbox-operator';
const instance = `${REPORTING_CONTROLLER}-${hostname()}`;

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

/** Records events without blocking the reconcile that caused them; failures are logged at debug. */
export class EventRecorder {
  constructor(
    private readonly client: KubeClient,
    private readonly log: Logger,
  ) {}

  record(regarding: { metadata: ObjectMeta }, rt: ResourceType, ev: EventSpec): void {
    const { name, namespace, uid } = regarding.metadata;
    if (!name || !namespace) return;
    const body = {
      apiVersion: 'events.k8s.io/v1',
      kind: 'Event',
      metadata: { name: eventName(name), namespace },
      eventTime: microTime(),
      reportingController: REPORTING_CONTROLLER,
      reportingInstance: instance,
      action: ev.action,
      reason: ev.reason,
      // The apiserver refuses a note past 1 kB; an error message quoted in one can be longer.
      note: ev.note.length > 1024 ? `${ev.note.slice(0, 1021)}...` : ev.note,
      type: ev.type,
      regarding: {
        apiVersion: rt.group ? `${rt.group}/${rt.version}` : rt.version,
        kind: rt.kind,
        name,
        namespace,
        uid,
      },
    };
    this.client
      .create(EventsV1, body)
      .catch((err: unknown) => this.log.debug({ err, reason: ev.reason }, 'event not recorded'));
  }
}
