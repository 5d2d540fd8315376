/**
 * The Events sandbox-apiserver's lifecycle verbs record on the Sandbox they acted on (docs/aggregated-layout.md
 * "Events"): one per verb, Normal when it succeeded, Warning with the failure's reason when the node refused or
 * failed it, each naming who asked. Recorded through the shared recorder (src/kube/events.ts), off the request's
 * path: the verb's answer never waits for, nor fails with, the Events API. exec records nothing (a command is not a
 * change of the sandbox's state, and kube-apiserver records no Event for `kubectl exec` either).
 */
import type { EventRecorder, EventSpec } from '../../kube/index.js';
import type { StatusFailure } from '../status.js';
import { SANDBOX_API_VERSION, type SandboxEntry } from './entry.js';

/** sandbox-apiserver's `reportingController`. */
export const APISERVER_REPORTING_CONTROLLER = 'sandbox-apiserver';

/** The reasons, in upstream agent-sandbox's style (src/operator/sandbox/events.ts has the controller's). */
export const SandboxVerbReasons = {
  paused: 'SandboxPaused',
  hibernated: 'SandboxHibernated',
  resumed: 'SandboxResumed',
  forked: 'SandboxForked',
  snapshotTaken: 'SandboxSnapshotTaken',
  pauseFailed: 'SandboxPauseFailed',
  resumeFailed: 'SandboxResumeFailed',
  forkFailed: 'SandboxForkFailed',
  snapshotFailed: 'SandboxSnapshotFailed',
  resumedElsewhere: 'SandboxResumedOnAnotherNode',
} as const;

/** The verbs that record an Event (exec does not). */
const FAILED: Record<string, string> = {
  pause: SandboxVerbReasons.pauseFailed,
  resume: SandboxVerbReasons.resumeFailed,
  fork: SandboxVerbReasons.forkFailed,
  snapshot: SandboxVerbReasons.snapshotFailed,
};

/** What a verb answered, as far as its Event says it. */
export type VerbOutcome =
  | { verb: 'pause'; mode: 'Memory' | 'Hibernate' }
  | {
      verb: 'resume';
      /** Resumed on another node from its hibernation record (docs/placement.md "Resume anywhere"). */
      moved?: Moved;
    }
  | { verb: 'fork'; children: string[] }
  | { verb: 'snapshot'; snapshotID: string; name?: string; nodeName: string };

/** Why a hibernated sandbox resumed on another node: its own node is gone, draining, or runs all it may. */
export type MovedBecause = 'unavailable' | 'draining' | 'full';

/** Where a hibernated sandbox resumed, from which record, and whether the record was fetched (its bytes). */
export interface Moved {
  from: string;
  to: string;
  checkpoint: string;
  fetchedBytes?: number;
  why: MovedBecause;
}

/** The Event one successful verb stands for. Pure. */
export function verbSucceededEvent(o: VerbOutcome, user: string): EventSpec {
  const by = `by ${user}`;
  switch (o.verb) {
    case 'pause':
      return o.mode === 'Hibernate'
        ? {
            type: 'Normal',
            reason: SandboxVerbReasons.hibernated,
            action: 'Hibernate',
            note: `Hibernated ${by}: memory written to disk and the VM stopped`,
          }
        : { type: 'Normal', reason: SandboxVerbReasons.paused, action: 'Pause', note: `Paused ${by}` };
    case 'resume':
      if (o.moved)
        return {
          type: 'Normal',
          reason: SandboxVerbReasons.resumedElsewhere,
          action: 'Resume',
          note: `Resumed ${by} on node ${o.moved.to}: node ${o.moved.from} is ${o.moved.why}; from hibernation record ${o.moved.checkpoint}, ${o.moved.fetchedBytes !== undefined ? `fetched from a peer (${o.moved.fetchedBytes} bytes)` : 'held there'}`,
        };
      return { type: 'Normal', reason: SandboxVerbReasons.resumed, action: 'Resume', note: `Resumed ${by}` };
    case 'fork':
      return {
        type: 'Normal',
        reason: SandboxVerbReasons.forked,
        action: 'Fork',
        note: `Forked ${by} into ${o.children.length} ${o.children.length === 1 ? 'child' : 'children'}: ${o.children.join(', ')}`,
      };
    case 'snapshot':
      return {
        type: 'Normal',
        reason: SandboxVerbReasons.snapshotTaken,
        action: 'Snapshot',
        note: `Snapshot ${o.snapshotID}${o.name ? ` ("${o.name}")` : ''} taken ${by} on node ${o.nodeName}`,
      };
  }
}

/** The Warning a failed verb stands for (undefined for exec). Pure. */
export function verbFailedEvent(verb: string, user: string, failure: StatusFailure): EventSpec | undefined {
  const reason = FAILED[verb];
  if (!reason) return undefined;
  const action = verb[0]!.toUpperCase() + verb.slice(1);
  return {
    type: 'Warning',
    reason,
    action,
    note: `${action} requested by ${user} failed (${failure.status.reason || failure.httpCode}): ${failure.message}`,
  };
}

/** Records the verbs' Events; a no-op without a recorder (`--disable-sandbox-events`). */
export class SandboxVerbEvents {
  constructor(private readonly recorder: EventRecorder | undefined) {}

  succeeded(e: SandboxEntry, outcome: VerbOutcome, user: string): void {
    this.record(e, verbSucceededEvent(outcome, user));
  }

  failed(e: SandboxEntry, verb: string, user: string, failure: StatusFailure): void {
    const ev = verbFailedEvent(verb, user, failure);
    if (ev) this.record(e, ev);
  }

  private record(e: SandboxEntry, ev: EventSpec): void {
    this.recorder?.recordFor(
      { apiVersion: SANDBOX_API_VERSION, kind: 'Sandbox', namespace: e.namespace, name: e.name, uid: e.uid },
      ev,
    );
  }
}
