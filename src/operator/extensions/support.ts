/**
 * Small helpers the extension controllers share: object types with required metadata, resourceVersion order,
 * Sandbox readiness, and a fire-and-forget events.k8s.io/v1 recorder.
 */
import { hostname } from 'node:os';
import type { Sandbox, SandboxClaim, SandboxTemplate, SandboxWarmPool } from '../../api/index.js';
import { EventsV1, type KubeClient, type ObjectMeta, type ResourceType } from '../../kube/index.js';
import type { Logger } from '../../log/logger.js';

type WithMeta<T> = T & { metadata: ObjectMeta };
export type SandboxObj = WithMeta<Sandbox>;
export type TemplateObj = WithMeta<SandboxTemplate>;
export type PoolObj = WithMeta<SandboxWarmPool>;
export type ClaimObj = WithMeta<SandboxClaim>;

/**
 * True when `a` is a strictly later version of the same object than `b`. resourceVersions are opaque to clients,
 * but every apiserver backed by etcd issues them as increasing integers; anything else compares as "not newer".
 */
export function isNewer(a: { metadata: ObjectMeta } | undefined, b: { metadata: ObjectMeta } | undefined): boolean {
  if (!a) return false;
  if (!b) return true;
  const ra = a.metadata.resourceVersion ?? '';
  const rb = b.metadata.resourceVersion ?? '';
  if (!/^\d+$/.test(ra) || !/^\d+$/.test(rb)) return false;
  return ra.length !== rb.length ? ra.length > rb.length : ra > rb;
}

/** The later of two views of one object (the cache's and the last write's response). */
export function newest<T extends { metadata: ObjectMeta }>(
  cached: T | undefined,
  written: T | undefined,
): T | undefined {
  return isNewer(written, cached) ? written : cached;
}

export function isSandboxReady(sb: Sandbox | undefined): boolean {
  return sb?.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
}

export const REPORTING_CONTROLLER = 'sandbox-operator';
const instance = `${REPORTING_CONTROLLER}-${hostname()}`;

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
      metadata: { generateName: `${name}.`, namespace },
      eventTime: microTime(),
      reportingController: REPORTING_CONTROLLER,
      reportingInstance: instance,
      action: ev.action,
      reason: ev.reason,
      note: ev.note,
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
