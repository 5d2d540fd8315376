/**
 * What the parts of a claim pass share (claim-controller.ts runs the pass; binding lookup, adoption, cold create,
 * metadata sync and expiry each live in their own module): the informers and manager, the per-claim records, and
 * how a part ends the pass early with a claim reason.
 */
import { SandboxError } from '../../errors.js';
import type { Informer, KubeObject, Manager } from '../../kube/index.js';
import type { Logger } from '../../log/logger.js';
import type { OperatorConfig } from '../options.js';
import type { CandidateQueues } from './candidates.js';
import { CLAIM_REASON_CODES, type ClaimReason } from '../../api/claim-status.js';
import type { ClaimBindings } from './claim-binding.js';
import type { ClaimWrites } from './claim-writes.js';
import type { ExtensionMetrics } from './metrics.js';
import type { ClaimObj, EventRecorder, PoolObj, SandboxObj, TemplateObj } from './support.js';

export interface ClaimDeps {
  manager: Manager;
  config: OperatorConfig;
  log: Logger;
  claims: Informer<ClaimObj>;
  sandboxes: Informer<SandboxObj>;
  pools: Informer<PoolObj>;
  templates: Informer<TemplateObj>;
  policies: Informer<KubeObject>;
}

export interface ClaimContext {
  readonly d: ClaimDeps;
  readonly candidates: CandidateQueues;
  readonly bindings: ClaimBindings;
  readonly writes: ClaimWrites;
  readonly events: EventRecorder;
  readonly metrics: ExtensionMetrics;
}

/** The Sandbox a pass resolved for its claim, and the template it came from. */
export interface Resolved {
  sandbox: SandboxObj;
  template: string | undefined;
}

/**
 * The pass ends without a Sandbox: the claim reports `reason`, the pass requeues after `requeueMs` if set, and unless
 * `suppressed` the pass also fails with it (logged, retried with backoff).
 */
export class Outcome extends SandboxError {
  constructor(
    readonly reason: ClaimReason,
    message: string,
    readonly requeueMs: number | undefined,
    readonly suppressed: boolean,
  ) {
    super(CLAIM_REASON_CODES[reason], message);
  }
}
