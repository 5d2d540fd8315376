/**
 * Sandbox status conditions with the newer upstream semantics (docs/operator.md "Status", "Newer upstream"): Ready,
 * Suspended (always present), PodScheduled (mirrors the owned Pod) and Finished. Pure: the caller passes what it
 * observed and the clock; `setCondition` follows metav1 SetStatusCondition (lastTransitionTime moves only on a status
 * flip).
 */
import type { Condition, SandboxStatus } from '../../api/index.js';
import type { Pod } from './types.js';

export const ConditionTypes = {
  ready: 'Ready',
  suspended: 'Suspended',
  podScheduled: 'PodScheduled',
  finished: 'Finished',
} as const;

export const ReadyReasons = {
  reconcilerError: 'ReconcilerError',
  invalidConfiguration: 'InvalidConfiguration',
  multiplePods: 'MultiplePods',
  suspended: 'SandboxSuspended',
  podSucceeded: 'PodSucceeded',
  podFailed: 'PodFailed',
  dependenciesReady: 'DependenciesReady',
  dependenciesNotReady: 'DependenciesNotReady',
  expired: 'SandboxExpired',
} as const;

/** Suspended condition states: reason, status and message (verbatim upstream). */
export const SuspendedStates = {
  NotSuspended: { status: 'False', message: 'Sandbox is not suspended' },
  PodTerminated: { status: 'True', message: 'Pod has been terminated. Sandbox is suspended' },
  PodTerminating: { status: 'False', message: 'Pod is terminating. Sandbox is suspending' },
  PodNotOwned: { status: 'False', message: 'Refused to delete pod because it is not owned by this sandbox' },
  PodStateUnknown: { status: 'Unknown', message: 'Pod state is unknown. Sandbox suspension cannot be confirmed' },
} as const satisfies Record<string, { status: Condition['status']; message: string }>;
export type SuspendedState = keyof typeof SuspendedStates;

export const EXPIRED_MESSAGE = 'Sandbox has expired';
export const POD_SCHEDULING_UNKNOWN = 'PodSchedulingUnknown';
export const NO_POD_SCHEDULED_MESSAGE = 'Pod has not reported a PodScheduled condition yet';

export function findCondition(conditions: readonly Condition[] | undefined, type: string): Condition | undefined {
  return conditions?.find((c) => c.type === type);
}

/**
 * metav1 SetStatusCondition: add the condition, or update it in place keeping its position; lastTransitionTime
 * changes only when the status changes. Returns a new array.
 */
export function setCondition(
  conditions: readonly Condition[] | undefined,
  next: Omit<Condition, 'lastTransitionTime'>,
  now: string,
): Condition[] {
  const out = [...(conditions ?? [])];
  const i = out.findIndex((c) => c.type === next.type);
  if (i < 0) {
    out.push({ ...next, lastTransitionTime: now });
    return out;
  }
  const prev = out[i]!;
  out[i] = {
    type: next.type,
    status: next.status,
    observedGeneration: next.observedGeneration,
    lastTransitionTime: prev.status === next.status ? prev.lastTransitionTime : now,
    reason: next.reason,
    message: next.message,
  };
  return out;
}

export function removeCondition(conditions: readonly Condition[] | undefined, type: string): Condition[] {
  return (conditions ?? []).filter((c) => c.type !== type);
}

/** What one reconcile pass observed, from which the status follows. */
export interface Observation {
  generation: number;
  suspended: boolean;
  /** The Pod the pass resolved: owned, or (suspended) the unowned one it refused to delete. */
  pod: Pod | undefined;
  podOwned: boolean;
  /** Set while suspended. */
  suspendedState?: SuspendedState;
  /** >1 Pods controlled by this Sandbox. */
  multiplePods?: number;
  /** Child errors of this pass (each a full sentence). */
  errors: string[];
  /** What makes the Sandbox's spec impossible to carry out (terminal: only an edit fixes it). */
  invalid?: string;
  /** Whether Ready must account for the Service (spec.service=true, or unset with a Service in use). */
  serviceRequired: boolean;
  serviceExists: boolean;
  /** status.service / serviceFQDN (undefined: cleared). */
  service: { name: string; fqdn: string } | undefined;
  /** status.selector when a pod was resolved. */
  selector: string;
}

const podReady = (pod: Pod) => pod.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
const podIPsOf = (pod: Pod): string[] => (pod.status?.podIPs ?? []).map((p) => p.ip).filter(Boolean);

/** Pod part of the Ready message (docs/operator.md "Status"). */
export function podReadinessMessage(pod: Pod | undefined): { ready: boolean; message: string } {
  if (!pod) return { ready: false, message: 'Pod does not exist' };
  const phase = pod.status?.phase ?? '';
  if (phase !== 'Running') return { ready: false, message: `Pod exists with phase: ${phase}` };
  if (!podReady(pod)) return { ready: false, message: 'Pod is Running but not Ready' };
  if (!podIPsOf(pod).length) return { ready: false, message: 'Pod is Ready but has no podIPs yet' };
  return { ready: true, message: 'Pod is Ready' };
}

/** The Ready condition (without lastTransitionTime) for an observation. */
export function readyCondition(o: Observation): Omit<Condition, 'lastTransitionTime'> {
  const c = (status: Condition['status'], reason: string, message: string) => ({
    type: ConditionTypes.ready,
    status,
    reason,
    message,
    observedGeneration: o.generation,
  });
  if (o.invalid) return c('False', ReadyReasons.invalidConfiguration, o.invalid);
  if (o.errors.length) return c('False', ReadyReasons.reconcilerError, `Error seen: ${o.errors.join('\n')}`);
  if (o.multiplePods) {
    return c(
      'False',
      ReadyReasons.multiplePods,
      `multiple Pods (${o.multiplePods}) are controlled by this Sandbox; refusing to choose or create a Pod`,
    );
  }
  if (o.suspended) return c('False', ReadyReasons.suspended, o.pod ? 'Sandbox is suspending' : 'Sandbox is suspended');
  const owned = o.podOwned ? o.pod : undefined;
  if (owned?.status?.phase === 'Succeeded') return c('False', ReadyReasons.podSucceeded, 'Pod completed successfully');
  if (owned?.status?.phase === 'Failed') return c('False', ReadyReasons.podFailed, 'Pod failed');
  const pod = podReadinessMessage(owned);
  let ready = pod.ready;
  let message = pod.message;
  if (o.serviceRequired) {
    message += o.serviceExists ? '; Service Exists' : '; Service does not exist';
    ready &&= o.serviceExists;
  }
  return c(
    ready ? 'True' : 'False',
    ready ? ReadyReasons.dependenciesReady : ReadyReasons.dependenciesNotReady,
    message,
  );
}

/** The expired Ready condition. */
export function expiredCondition(generation: number): Omit<Condition, 'lastTransitionTime'> {
  return {
    type: ConditionTypes.ready,
    status: 'False',
    reason: ReadyReasons.expired,
    message: EXPIRED_MESSAGE,
    observedGeneration: generation,
  };
}

/**
 * The whole status after a non-expired pass. Unknown fields of `prev` are kept; selector is never cleared once
 * set (only expiry clears it); podIPs/nodeName/Finished/PodScheduled come from an owned Pod only.
 */
export function computeStatus(prev: SandboxStatus | undefined, o: Observation, now: string): SandboxStatus {
  const status: SandboxStatus = { ...(prev ?? {}) };
  const gen = o.generation;
  let conditions = prev?.conditions ? [...prev.conditions] : [];
  const owned = o.podOwned ? o.pod : undefined;

  if (o.pod) status.selector = o.selector;
  const ips = owned ? podIPsOf(owned) : [];
  if (ips.length) status.podIPs = ips;
  else delete status.podIPs;
  if (owned?.spec.nodeName) status.nodeName = owned.spec.nodeName;
  else delete status.nodeName;
  if (o.service) {
    status.service = o.service.name;
    status.serviceFQDN = o.service.fqdn;
  } else {
    delete status.service;
    delete status.serviceFQDN;
  }

  const suspendedState: SuspendedState = o.suspended ? (o.suspendedState ?? 'PodTerminated') : 'NotSuspended';
  const s = SuspendedStates[suspendedState];
  conditions = setCondition(
    conditions,
    {
      type: ConditionTypes.suspended,
      status: s.status,
      reason: suspendedState,
      message: s.message,
      observedGeneration: gen,
    },
    now,
  );

  if (owned) {
    const pc = owned.status?.conditions?.find((c) => c.type === 'PodScheduled');
    const mirrored = pc
      ? {
          status: pc.status,
          reason: pc.reason || (pc.status === 'True' ? 'PodScheduled' : POD_SCHEDULING_UNKNOWN),
          message: pc.message ?? '',
        }
      : { status: 'Unknown' as const, reason: POD_SCHEDULING_UNKNOWN, message: NO_POD_SCHEDULED_MESSAGE };
    conditions = setCondition(
      conditions,
      { type: ConditionTypes.podScheduled, ...mirrored, observedGeneration: gen },
      now,
    );
  } else conditions = removeCondition(conditions, ConditionTypes.podScheduled);

  const phase = owned?.status?.phase;
  if (phase === 'Succeeded' || phase === 'Failed') {
    const reason = phase === 'Succeeded' ? ReadyReasons.podSucceeded : ReadyReasons.podFailed;
    const message = phase === 'Succeeded' ? 'Pod completed successfully' : 'Pod failed';
    conditions = setCondition(
      conditions,
      { type: ConditionTypes.finished, status: 'True', reason, message, observedGeneration: gen },
      now,
    );
  } else conditions = removeCondition(conditions, ConditionTypes.finished);

  conditions = setCondition(conditions, readyCondition(o), now);
  status.conditions = conditions;
  return status;
}

/** Status after the expiry teardown: only the conditions survive (PodScheduled dropped; Ready stays SandboxExpired). */
export function expiredStatus(prev: SandboxStatus | undefined): SandboxStatus {
  return { conditions: removeCondition(prev?.conditions, ConditionTypes.podScheduled) };
}

/** Whether the status carries Ready=False SandboxExpired. */
export function isMarkedExpired(status: SandboxStatus | undefined): boolean {
  return findCondition(status?.conditions, ConditionTypes.ready)?.reason === ReadyReasons.expired;
}
