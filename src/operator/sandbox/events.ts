/**
 * The Sandbox's lifecycle Events (docs/operator.md "Events"), as agent-sandbox 1.0 emits them: one per transition,
 * never one per pass. The status transitions are read off each status write (before and after: a write only
 * happens when something changed, and a failed write records nothing, so its retry still sees the transition); a
 * Pod create failure is reported once per run of failures, until a create succeeds or the Sandbox goes.
 * `--disable-sandbox-events` leaves the recorder out and this records nothing.
 */
import type { SandboxStatus } from '../../api/index.js';
import { Sandboxes } from '../../kube/index.js';
import type { EventRecorder, EventSpec } from '../events.js';
import { ConditionTypes, findCondition, ReadyReasons } from './conditions.js';
import type { SandboxObject } from './types.js';

export const SandboxEventReasons = {
  podCreated: 'SandboxPodCreated',
  podCreateFailed: 'SandboxPodCreateFailed',
  ready: 'SandboxReady',
  suspended: 'SandboxSuspended',
  expired: 'SandboxExpired',
  podSucceeded: 'PodSucceeded',
  podFailed: 'PodFailed',
} as const;

/** The events one status write stands for: each condition that turned on between `before` and `after`. Pure. */
export function statusTransitionEvents(before: SandboxStatus | undefined, after: SandboxStatus): EventSpec[] {
  const was = (type: string) => findCondition(before?.conditions, type);
  const is = (type: string) => findCondition(after.conditions, type);
  const out: EventSpec[] = [];
  const ready = is(ConditionTypes.ready);
  const readyBefore = was(ConditionTypes.ready);
  if (ready?.status === 'True' && readyBefore?.status !== 'True')
    out.push({ type: 'Normal', reason: SandboxEventReasons.ready, action: 'Ready', note: ready.message });
  const suspended = is(ConditionTypes.suspended);
  if (suspended?.status === 'True' && was(ConditionTypes.suspended)?.status !== 'True')
    out.push({ type: 'Normal', reason: SandboxEventReasons.suspended, action: 'Suspend', note: suspended.message });
  if (ready?.reason === ReadyReasons.expired && readyBefore?.reason !== ReadyReasons.expired)
    out.push({ type: 'Normal', reason: SandboxEventReasons.expired, action: 'Expire', note: ready.message });
  const finished = is(ConditionTypes.finished);
  const finishedBefore = was(ConditionTypes.finished);
  if (
    finished?.status === 'True' &&
    !(finishedBefore?.status === 'True' && finishedBefore.reason === finished.reason)
  ) {
    const failed = finished.reason === ReadyReasons.podFailed;
    out.push({
      type: failed ? 'Warning' : 'Normal',
      reason: failed ? SandboxEventReasons.podFailed : SandboxEventReasons.podSucceeded,
      action: 'Finish',
      note: finished.message,
    });
  }
  return out;
}

export class SandboxEvents {
  /** Sandbox UID -> a Pod create failed and nothing has been created since (the failure is already reported). */
  private readonly failing = new Set<string>();

  constructor(private readonly recorder: EventRecorder | undefined) {}

  podCreated(sb: SandboxObject, podName: string): void {
    this.failing.delete(sb.metadata.uid ?? '');
    this.record(sb, {
      type: 'Normal',
      reason: SandboxEventReasons.podCreated,
      action: 'Create',
      note: `Created Pod "${podName}"`,
    });
  }

  podCreateFailed(sb: SandboxObject, podName: string, message: string): void {
    const uid = sb.metadata.uid ?? '';
    if (this.failing.has(uid)) return;
    this.failing.add(uid);
    this.record(sb, {
      type: 'Warning',
      reason: SandboxEventReasons.podCreateFailed,
      action: 'Create',
      note: `Failed to create Pod "${podName}": ${message}`,
    });
  }

  statusWritten(sb: SandboxObject, before: SandboxStatus | undefined, after: SandboxStatus): void {
    for (const ev of statusTransitionEvents(before, after)) this.record(sb, ev);
  }

  forget(uid: string): void {
    this.failing.delete(uid);
  }

  private record(sb: SandboxObject, ev: EventSpec): void {
    this.recorder?.record(sb, Sandboxes, ev);
  }
}
