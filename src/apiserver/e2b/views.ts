/**
 * A served Sandbox (the aggregated API's entry) as the e2b API's objects, every field from the sandbox itself:
 * templateID and metadata as created (annotations of the object), startedAt the node's claim time, endAt the node's
 * lease, cpuCount and memoryMB the VM the node claimed, diskSizeMB its writable layer (the guest's tmpfs
 * copy-on-write root, half the VM's memory), state the node's phase. `clientID`, which e2b no longer reads, is the
 * node's name.
 */
import { CocoonAnnotationKeys, E2B_PUBLIC_TRAFFIC_ANNOTATION } from '../../api/keys.js';
import { ENVD_VERSION, trafficAccessToken } from '../../api/envd.js';
import type { SandboxEntry } from '../sandboxes/entry.js';
import { networkView } from './network.js';

export const E2B_ANNOTATIONS = {
  templateId: 'e2b.dev/template-id',
  metadata: 'e2b.dev/metadata',
  /**
   * `"true"`: a request to the sandbox while it is paused resumes it (the create's `autoResume: {enabled: true}`;
   * src/apiserver/e2b/auto-resume.ts). Kept on the object as autoPause's `on-expiry` is, so a fork child keeps it.
   */
  autoResume: 'e2b.dev/auto-resume',
} as const;

/** Whether a request to this sandbox while it is paused resumes it (docs/e2b.md "Auto-resume"). */
export const autoResumeOf = (e: SandboxEntry): boolean =>
  e.object.metadata.annotations?.[E2B_ANNOTATIONS.autoResume] === 'true';

export function templateIdOf(e: SandboxEntry): string {
  return e.object.metadata.annotations?.[E2B_ANNOTATIONS.templateId] ?? e.pool.template;
}

export function metadataOf(e: SandboxEntry): Record<string, string> {
  const raw = e.object.metadata.annotations?.[E2B_ANNOTATIONS.metadata];
  if (!raw) return {};
  try {
    const v = JSON.parse(raw) as unknown;
    return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, string>) : {};
  } catch {
    return {};
  }
}

/** Paused in either of the node's modes (memory-resident or hibernated), by this API or the pause subresource. */
/** `Suspended` (hibernated by an idle policy) is running to e2b: the next request wakes it (docs/e2b.md). */
export const stateOf = (e: SandboxEntry): 'running' | 'paused' =>
  e.phase === 'Paused' || e.phase === 'Hibernated' ? 'paused' : 'running';

const iso = (ts: string) => new Date(Date.parse(ts)).toISOString();

/**
 * When the sandbox started, to the millisecond: its node's claim time (SandboxEntry.claimedAt); the object's
 * creationTimestamp (whole seconds) only for a row without one.
 */
export const startedAt = (e: SandboxEntry): string => e.claimedAt || e.object.metadata.creationTimestamp;

/** `Sandbox` (create, connect): what the SDK needs to reach envd. */
export function sandboxView(e: SandboxEntry, envdAccessToken: string, domain: string | undefined) {
  return {
    sandboxID: e.name,
    templateID: templateIdOf(e),
    alias: templateIdOf(e),
    clientID: e.node,
    envdVersion: ENVD_VERSION,
    envdAccessToken,
    // Only a sandbox whose ports are not public has one (e2b's allowPublicTraffic: false): the SDK sends it to them.
    trafficAccessToken:
      e.object.metadata.annotations?.[E2B_PUBLIC_TRAFFIC_ANNOTATION] === 'true'
        ? null
        : trafficAccessToken(envdAccessToken),
    domain: domain ?? null,
  };
}

/** `ListedSandbox` (list). */
export function listedView(e: SandboxEntry) {
  const memoryMB = e.memoryMiB ?? 0;
  return {
    sandboxID: e.name,
    templateID: templateIdOf(e),
    alias: templateIdOf(e),
    clientID: e.node,
    startedAt: iso(startedAt(e)),
    endAt: iso(e.deadline),
    cpuCount: e.vcpus ?? 0,
    memoryMB,
    diskSizeMB: Math.floor(memoryMB / 2),
    state: stateOf(e),
    envdVersion: ENVD_VERSION,
    metadata: metadataOf(e),
  };
}

/** `SandboxDetail` (getInfo): the listed fields plus the access token, domain and lifecycle. */
export function detailView(e: SandboxEntry, envdAccessToken: string, domain: string | undefined) {
  const onExpiry = e.object.metadata.annotations?.[CocoonAnnotationKeys.onExpiry];
  const autoPause = onExpiry === 'hibernate' || onExpiry === 'pause-filesystem';
  return {
    ...listedView(e),
    envdAccessToken,
    domain: domain ?? null,
    ...networkView(e),
    lifecycle: { onTimeout: autoPause ? 'pause' : 'kill', autoResume: autoResumeOf(e) },
    // What the pause kept, while paused: `filesystem` (files only; resume reboots) or `full` (memory too).
    ...(stateOf(e) === 'paused' ? { pauseMode: e.pauseMode ?? 'full' } : {}),
  };
}
