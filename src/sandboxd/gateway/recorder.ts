/**
 * The asynchronous Bound record (docs/claim-gateway.md "Record"): after the answer has been
 * written, the delivery becomes a SandboxClaim in Kubernetes — created if the caller made none, else labelled and
 * annotated — whose status names the Sandbox (`status.sandbox.name`, the claim's name) with conditions Bound and
 * Ready, and the annotations upstream clients and the operator read (`sandbox-name`, `sandbox-template-ref`,
 * `controller-first-observed-at`, the claim id). Idempotent: every step looks at what is there first (a create
 * that finds the claim reads it; a claim already bound to this sandbox gets no write), so a retry after a lost
 * answer or a restart never writes twice or binds twice. Bounded concurrency, every request bounded in time; a
 * record that fails is only logged — the delivery is an orphan until adoption records it (adoption.ts).
 */
import {
  AnnotationKeys,
  CocoonAnnotationKeys,
  type Condition,
  type SandboxClaim,
  type SandboxClaimStatus,
  kubeTime,
} from '../../api/index.js';
import type { ObjectMeta } from '../../api/meta.js';
import { isAlreadyExists, isConflict, isNotFound, SandboxClaims, type KubeClient } from '../../kube/index.js';
import type { Logger } from '../../log/logger.js';
import type { DeliveryLedger } from './ledger.js';
import type { Delivery } from './request.js';

type ClaimObj = SandboxClaim & { metadata: ObjectMeta };

/** Why a recorded sandbox is gone, as the claim's Ready condition says it (upstream's reasons). */
export type GoneReason = 'SandboxExpired' | 'SandboxMissing';

type Job = { kind: 'record'; d: Delivery } | { kind: 'gone'; d: Delivery; uid: string; reason: GoneReason };

export interface RecorderOptions {
  client: KubeClient;
  node: string;
  /** The node's host, the claim's `status.sandbox.podIPs` (as the aggregated Sandbox's). */
  host: string;
  ledger: DeliveryLedger;
  log: Logger;
  concurrency?: number;
  /** Bound on one record, all its requests together (ms). */
  timeoutMs?: number;
}

export function boundTo(claim: ClaimObj, d: Delivery): boolean {
  return (
    claim.metadata.annotations?.[CocoonAnnotationKeys.claimId] === d.id &&
    claim.status?.sandbox?.name === d.name &&
    claim.status.conditions?.some((c) => c.type === 'Bound' && c.status === 'True') === true
  );
}

export class ClaimRecorder {
  private readonly queue: Job[] = [];
  /** Jobs queued or running, by sandbox id: a delivery is recorded by one job at a time. */
  private readonly active = new Set<string>();
  /** Deliveries whose claim is bound to another sandbox: reported once, never rewritten. */
  private readonly conflicts = new Set<string>();
  private running = 0;
  private scheduled = false;
  private waiters: Array<() => void> = [];
  private readonly concurrency: number;
  private readonly timeoutMs: number;
  readonly stats = { recorded: 0, unchanged: 0, created: 0, failures: 0, conflicts: 0, gone: 0 };

  constructor(private readonly o: RecorderOptions) {
    this.concurrency = o.concurrency ?? 8;
    this.timeoutMs = o.timeoutMs ?? 10_000;
  }

  /** Record a delivery (after the current tick: the answer is written first). */
  enqueue(d: Delivery): void {
    if (this.active.has(d.id) || this.conflicts.has(d.id)) return;
    this.push({ kind: 'record', d });
  }

  /** A recorded sandbox is gone (its lease ended, or it was released by its token): its claim says so. */
  enqueueGone(d: Delivery, uid: string, reason: GoneReason): void {
    this.conflicts.delete(d.id);
    this.push({ kind: 'gone', d, uid, reason });
  }

  /** Whether a job for this sandbox is queued or running. */
  busy(id: string): boolean {
    return this.active.has(id);
  }

  /** Resolves when nothing is queued or running (tests, shutdown). */
  drained(): Promise<void> {
    if (this.running === 0 && this.queue.length === 0) return Promise.resolve();
    return new Promise((r) => this.waiters.push(r));
  }

  private push(job: Job): void {
    this.active.add(job.d.id);
    this.queue.push(job);
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      this.pump();
    });
  }

  private pump(): void {
    while (this.running < this.concurrency && this.queue.length) {
      const job = this.queue.shift()!;
      this.running++;
      void this.run(job).finally(() => {
        this.running--;
        this.active.delete(job.d.id);
        this.pump();
        if (this.running === 0 && this.queue.length === 0) for (const w of this.waiters.splice(0)) w();
      });
    }
  }

  private async run(job: Job): Promise<void> {
    const signal = AbortSignal.timeout(this.timeoutMs);
    const claim = `${job.d.namespace}/${job.d.name}`;
    try {
      if (job.kind === 'record') await this.record(job.d, signal);
      else await this.gone(job.d, job.uid, job.reason, signal);
    } catch (err) {
      this.stats.failures++;
      this.o.log.warn(
        { err, claim, sandbox: job.d.id },
        job.kind === 'record'
          ? 'recording the claim failed; it is recorded once kube-apiserver answers (orphan adoption)'
          : 'marking the claim of a released sandbox failed',
      );
    }
  }

  private async record(d: Delivery, signal: AbortSignal): Promise<void> {
    const { client, node } = this.o;
    const labels = { [CocoonAnnotationKeys.gatewayNode]: node };
    const annotations: Record<string, string> = {
      [AnnotationKeys.sandboxName]: d.name,
      [AnnotationKeys.controllerFirstObservedAt]: kubeTime(d.claimedAtMs),
      [CocoonAnnotationKeys.claimId]: d.id,
      [CocoonAnnotationKeys.node]: node,
      ...(d.template ? { [AnnotationKeys.sandboxTemplateRef]: d.template } : {}),
      ...(d.user ? { [CocoonAnnotationKeys.claimedBy]: d.user } : {}),
    };
    let claim: ClaimObj;
    try {
      claim = await client.create<ClaimObj>(
        SandboxClaims,
        {
          apiVersion: `${SandboxClaims.group}/${SandboxClaims.version}`,
          kind: SandboxClaims.kind,
          metadata: { name: d.name, namespace: d.namespace, labels, annotations },
          spec: { warmPoolRef: { name: d.warmPool } },
        },
        { signal },
      );
      this.stats.created++;
    } catch (err) {
      if (!isAlreadyExists(err)) throw err;
      claim = await client.get<ClaimObj>(SandboxClaims, d.namespace, d.name, undefined, { signal });
      const bound = claim.metadata.annotations?.[CocoonAnnotationKeys.claimId];
      if (bound !== d.id && (bound !== undefined || claim.status?.sandbox?.name)) {
        this.conflicts.add(d.id);
        this.stats.conflicts++;
        this.o.log.warn(
          { claim: `${d.namespace}/${d.name}`, sandbox: d.id, boundTo: bound ?? claim.status?.sandbox?.name },
          'the claim is bound to another sandbox; this delivery stays unrecorded (its lease ends it)',
        );
        return;
      }
      const have = claim.metadata.annotations ?? {};
      // the first-observed time of a claim someone else made is theirs
      if (have[AnnotationKeys.controllerFirstObservedAt]) delete annotations[AnnotationKeys.controllerFirstObservedAt];
      const missing = Object.entries(annotations).filter(([k, v]) => have[k] !== v);
      if (missing.length || claim.metadata.labels?.[CocoonAnnotationKeys.gatewayNode] !== node)
        claim = await client.patch<ClaimObj>(
          SandboxClaims,
          d.namespace,
          d.name,
          { metadata: { labels, annotations: Object.fromEntries(missing) } },
          'merge',
          { signal },
        );
    }
    if (boundTo(claim, d)) this.stats.unchanged++;
    else
      claim = await client.patch<ClaimObj>(
        SandboxClaims,
        d.namespace,
        d.name,
        { status: this.boundStatus(claim, d) },
        'merge',
        { subresource: 'status', signal },
      );
    this.o.ledger.set(d.id, claim.metadata.uid!);
    this.stats.recorded++;
  }

  private boundStatus(claim: ClaimObj, d: Delivery): SandboxClaimStatus {
    const now = kubeTime();
    const gen = claim.metadata.generation;
    const cond = (type: string, reason: string, message: string): Condition => ({
      type,
      status: 'True',
      reason,
      message,
      lastTransitionTime: now,
      ...(gen !== undefined ? { observedGeneration: gen } : {}),
    });
    return {
      sandbox: { name: d.name, podIPs: [this.o.host] },
      conditions: [
        cond('Bound', 'NodeLocalClaim', `sandbox ${d.id} delivered by the claim gateway of node ${this.o.node}`),
        cond('Ready', 'SandboxReady', `sandbox ${d.name} (${d.id}) is running on node ${this.o.node}`),
      ],
    };
  }

  /** Ready=False on the claim it was recorded for (the UID in the patch makes any other claim of the name a 409). */
  private async gone(d: Delivery, uid: string, reason: GoneReason, signal: AbortSignal): Promise<void> {
    const now = kubeTime();
    const message =
      reason === 'SandboxExpired'
        ? `the lease of sandbox ${d.id} on node ${this.o.node} ended`
        : `sandbox ${d.id} was released on node ${this.o.node}`;
    const conditions: Condition[] = [
      { type: 'Bound', status: 'False', reason, message, lastTransitionTime: now },
      { type: 'Ready', status: 'False', reason, message, lastTransitionTime: now },
    ];
    try {
      await this.o.client.patch(
        SandboxClaims,
        d.namespace,
        d.name,
        { metadata: { uid }, status: { sandbox: null, conditions } },
        'merge',
        { subresource: 'status', signal },
      );
      this.stats.gone++;
    } catch (err) {
      if (isNotFound(err) || isConflict(err)) return; // the claim is gone, or it is another claim of that name
      throw err;
    }
  }
}
