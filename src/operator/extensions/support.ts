/**
 * Small helpers the extension controllers share: object types with required metadata, resourceVersion order,
 * Sandbox readiness, and (re-exported from ../events.ts, which the Sandbox controller shares) the events recorder.
 */
import type { Sandbox, SandboxClaim, SandboxTemplate, SandboxWarmPool } from '../../api/index.js';
import type { ObjectMeta } from '../../kube/index.js';

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

export { EventRecorder, microTime, operatorEventRecorder, REPORTING_CONTROLLER, type EventSpec } from '../events.js';
