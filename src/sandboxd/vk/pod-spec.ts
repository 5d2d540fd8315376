/**
 * Pure functions between Pods and VMs: what a Pod asks for (pool key, lease) and the status that reports it.
 * Everything here is table-tested without a cluster (test/sandboxd/vk-unit.test.ts).
 */
import { CocoonAnnotationKeys, idleSecondsAnnotation, LabelKeys } from '../../api/keys.js';
import { SandboxError } from '../../errors.js';
import { parsePoolKey, type PoolKey } from '../pool-key.js';
import type { ContainerStatus, Pod, PodCondition, PodStatus, VirtualNodeKind } from './types.js';

/** vk-sandbox's default lease when a Pod names none (docs/runtime-adapter.md). */
export const DEFAULT_POD_TTL_SECONDS = 86_400;

export interface VmRequest {
  key: PoolKey;
  /** undefined = the engine's default lease. */
  ttlSeconds: number | undefined;
  /** vk-cocoon pods live as long as the Pod: the node renews their lease. */
  renew: boolean;
  /** The idle policy (annotation CocoonAnnotationKeys.idleHibernateSeconds; src/sandboxd/idle.ts). */
  idleHibernateSeconds?: number;
}

export type VmRequestResult = { ok: true; request: VmRequest } | { ok: false; reason: string; message: string };

/** The image a pod boots: the runtime adapter's annotation, else the first container's image. */
export function podImage(pod: Pod, kind: VirtualNodeKind): string | undefined {
  const a = pod.metadata.annotations ?? {};
  const fromAnnotation =
    kind === 'vk-cocoon' ? a[CocoonAnnotationKeys.cocoonsetImage] : a[CocoonAnnotationKeys.template];
  return fromAnnotation?.trim() || pod.spec.containers[0]?.image?.trim() || undefined;
}

/** Map a Pod to a VM request, or to the reason it cannot run (reported on the Pod, not retried). */
export function vmRequestFor(pod: Pod, kind: VirtualNodeKind, knownTemplates: readonly string[]): VmRequestResult {
  const a = pod.metadata.annotations ?? {};
  if (kind === 'sandboxd') {
    const runtime = a[CocoonAnnotationKeys.runtime]?.trim();
    if (runtime && runtime !== 'sandboxd')
      return {
        ok: false,
        reason: 'InvalidRuntime',
        message: `annotation ${CocoonAnnotationKeys.runtime}="${runtime}" but this node serves runtime "sandboxd"`,
      };
  }
  const image = podImage(pod, kind);
  if (!image)
    return {
      ok: false,
      reason: 'UnknownTemplate',
      message: `the pod names no image; known templates: ${knownTemplates.join(', ')}`,
    };
  let key: PoolKey;
  try {
    key = parsePoolKey({ template: image, net: a[CocoonAnnotationKeys.net], size: a[CocoonAnnotationKeys.size] });
  } catch (err) {
    return { ok: false, reason: 'InvalidSandboxRequest', message: err instanceof Error ? err.message : String(err) };
  }
  if (!knownTemplates.includes(key.template))
    return {
      ok: false,
      reason: 'UnknownTemplate',
      message: `image "${image}" names no sandbox template on this node; known templates: ${knownTemplates.join(', ')}`,
    };
  const idle = idleSecondsAnnotation(a);
  if (typeof idle === 'string') return { ok: false, reason: 'InvalidSandboxRequest', message: idle };
  // A warm pool's member waits to be claimed: suspending it while it waits would make the claim's first request wake
  // it. Its policy applies once a claim adopts it (the adoption removes the pool's label from the Pod).
  const waiting = pod.metadata.labels?.[LabelKeys.warmPoolSandbox] !== undefined;
  const policy = idle && !waiting ? { idleHibernateSeconds: idle } : {};
  if (kind === 'vk-cocoon')
    return { ok: true, request: { key, ttlSeconds: DEFAULT_POD_TTL_SECONDS, renew: true, ...policy } };
  const rawTtl = a[CocoonAnnotationKeys.ttlSeconds]?.trim();
  let ttlSeconds: number | undefined = DEFAULT_POD_TTL_SECONDS;
  if (rawTtl !== undefined && rawTtl !== '') {
    const n = Number(rawTtl);
    if (!Number.isInteger(n) || n < 0)
      return {
        ok: false,
        reason: 'InvalidSandboxRequest',
        message: `annotation ${CocoonAnnotationKeys.ttlSeconds}="${rawTtl}" is not a non-negative whole number of seconds`,
      };
    ttlSeconds = n === 0 ? undefined : n;
  }
  return { ok: true, request: { key, ttlSeconds, renew: false, ...policy } };
}

/** Reason a claim failed, for the Pod's waiting state; `retry` = worth another attempt later. */
export function claimFailure(err: unknown): { reason: string; message: string; retry: boolean } {
  const message = err instanceof Error ? err.message : String(err);
  if (err instanceof SandboxError) {
    if (err.code === 'sandboxd.at-capacity') return { reason: 'AtCapacity', message, retry: true };
    if (err.code === 'sandboxd.draining') return { reason: 'NodeDraining', message, retry: true };
    if (err.code === 'sandboxd.bad-request') return { reason: 'InvalidSandboxRequest', message, retry: false };
  }
  return { reason: 'VMCreateFailed', message, retry: true };
}

export const containerIdOf = (claimId: string): string => `sandboxd://${claimId}`;

export interface RunningInput {
  claimId: string;
  hostAddress: string;
  /**
   * The VM's own address (a networked VM's namespace address, DNAT'd to the guest): the pod's IP, which Services and
   * in-cluster clients reach. Absent (a NIC-less or simulated VM): the node's address, as the host network is.
   */
  podAddress?: string;
  ready: boolean;
  restartCount: number;
  now: string;
  /** Why the VM is not ready (paused, hibernated). */
  notReadyReason?: string;
  /** The Ready condition's message; by default "the microVM is <reason>". */
  notReadyMessage?: string;
}

function condition(
  prev: PodStatus | undefined,
  type: string,
  ok: boolean,
  now: string,
  reason?: string,
  message?: string,
): PodCondition {
  const status = ok ? 'True' : 'False';
  const old = prev?.conditions?.find((c) => c.type === type);
  return {
    type,
    status,
    lastTransitionTime: old && old.status === status && old.lastTransitionTime ? old.lastTransitionTime : now,
    ...(reason ? { reason } : {}),
    ...(message ? { message } : {}),
  };
}

/** The conditions this kubelet writes; any other type on a Pod is someone else's. */
const OWN_CONDITIONS = new Set([
  'PodReadyToStartContainers',
  'Initialized',
  'Ready',
  'ContainersReady',
  'PodScheduled',
]);

/**
 * `own` followed by the Pod's conditions of other types, kept as they are: a status patch replaces the whole list, and
 * a kubelet keeps what others set (the apiserver's `DisruptionTarget` on an eviction, which the hand-off reads;
 * readiness gates' conditions).
 */
function keepingOthers(prev: PodStatus | undefined, own: PodCondition[]): PodCondition[] {
  return [...own, ...(prev?.conditions ?? []).filter((c) => !OWN_CONDITIONS.has(c.type))];
}

/**
 * Status of a Pod whose VM runs: Running, Ready per the VM, one running container status per spec container, the VM's
 * address as the pod's IP.
 */
export function runningStatus(pod: Pod, input: RunningInput): PodStatus {
  const prev = pod.status;
  const containerID = containerIdOf(input.claimId);
  const startedAt = (name: string): string => {
    const old = prev?.containerStatuses?.find((c) => c.name === name);
    return old?.containerID === containerID && old.state.running?.startedAt ? old.state.running.startedAt : input.now;
  };
  const podIP = input.podAddress ?? input.hostAddress;
  const notReady = input.ready ? undefined : (input.notReadyReason ?? 'VMNotRunning');
  const containerStatuses: ContainerStatus[] = pod.spec.containers.map((c) => ({
    name: c.name,
    image: c.image ?? '',
    imageID: containerID,
    containerID,
    ready: input.ready,
    started: true,
    restartCount: input.restartCount,
    state: { running: { startedAt: startedAt(c.name) } },
  }));
  return {
    phase: 'Running',
    reason: null,
    message: null,
    hostIP: input.hostAddress,
    hostIPs: [{ ip: input.hostAddress }],
    podIP,
    podIPs: [{ ip: podIP }],
    startTime: prev?.startTime ?? input.now,
    conditions: keepingOthers(prev, [
      condition(prev, 'PodReadyToStartContainers', true, input.now),
      condition(prev, 'Initialized', true, input.now),
      condition(
        prev,
        'Ready',
        input.ready,
        input.now,
        notReady,
        notReady && (input.notReadyMessage ?? `the microVM is ${notReady}`),
      ),
      condition(prev, 'ContainersReady', input.ready, input.now, notReady),
      condition(prev, 'PodScheduled', true, input.now),
    ]),
    containerStatuses,
  };
}

/** Status of a Pod that cannot (yet) get a VM: Pending, containers waiting with `reason`. */
export function waitingStatus(pod: Pod, reason: string, message: string, now: string): PodStatus {
  const prev = pod.status;
  return {
    phase: 'Pending',
    reason: null,
    message: null,
    conditions: keepingOthers(prev, [
      condition(prev, 'PodReadyToStartContainers', false, now),
      condition(prev, 'Initialized', true, now),
      condition(prev, 'Ready', false, now, 'ContainersNotReady', message),
      condition(prev, 'ContainersReady', false, now, 'ContainersNotReady', message),
      condition(prev, 'PodScheduled', true, now),
    ]),
    containerStatuses: pod.spec.containers.map((c) => ({
      name: c.name,
      image: c.image ?? '',
      imageID: '',
      ready: false,
      started: false,
      restartCount: 0,
      state: { waiting: { reason, message } },
    })),
  };
}

/** Status of a Pod whose VM is gone for good (lease expired, released through the node API). */
export function failedStatus(pod: Pod, reason: string, message: string, now: string): PodStatus {
  const prev = pod.status;
  return {
    phase: 'Failed',
    reason,
    message,
    conditions: keepingOthers(prev, [
      condition(prev, 'PodReadyToStartContainers', false, now),
      condition(prev, 'Initialized', true, now),
      condition(prev, 'Ready', false, now, 'PodFailed', message),
      condition(prev, 'ContainersReady', false, now, 'PodFailed', message),
      condition(prev, 'PodScheduled', true, now),
    ]),
    containerStatuses: pod.spec.containers.map((c) => {
      const old = prev?.containerStatuses?.find((s) => s.name === c.name);
      return {
        name: c.name,
        image: c.image ?? '',
        imageID: old?.imageID ?? '',
        ...(old?.containerID ? { containerID: old.containerID } : {}),
        ready: false,
        started: false,
        restartCount: old?.restartCount ?? 0,
        state: {
          terminated: {
            exitCode: 137,
            reason,
            message,
            ...(old?.state.running?.startedAt ? { startedAt: old.state.running.startedAt } : {}),
            finishedAt: now,
          },
        },
      };
    }),
  };
}

/**
 * True if writing `want` would change the Pod's status. Compares only the fields `want` sets (a merge patch
 * leaves the others alone); timestamps are already carried over from the current status by the builders.
 */
export function statusDiffers(current: PodStatus | undefined, want: PodStatus): boolean {
  const cur = (current ?? {}) as Record<string, unknown>;
  for (const [k, v] of Object.entries(want)) {
    const c = cur[k];
    if (v === null) {
      if (c !== undefined && c !== null && c !== '') return true;
      continue;
    }
    if (canonical(c) !== canonical(v)) return true;
  }
  return false;
}

function canonical(v: unknown): string {
  return JSON.stringify(v, (_k, val: unknown) =>
    val && typeof val === 'object' && !Array.isArray(val)
      ? Object.fromEntries(Object.entries(val as Record<string, unknown>).sort(([a], [b]) => a.localeCompare(b)))
      : val,
  );
}
