/**
 * The claim's lifecycle clock and its status (docs/claim-model.md "The pass", "Status"): pure functions of the claim,
 * the Sandbox it resolved (if any) and the outcome of the pass.
 */
import { isDeepStrictEqual } from 'node:util';
import type { Condition, Lifecycle, Sandbox, SandboxClaim, SandboxClaimStatus } from './index.js';
import type { ErrorCode } from '../error-codes.js';

export const ClaimReasons = {
  templateNotFound: 'TemplateNotFound',
  warmPoolNotFound: 'WarmPoolNotFound',
  invalidMetadata: 'InvalidMetadata',
  envRejected: 'EnvVarsInjectionRejected',
  vctError: 'VolumeClaimTemplatesError',
  reconcilerError: 'ReconcilerError',
  claimExpired: 'ClaimExpired',
  sandboxMissing: 'SandboxMissing',
  sandboxExpired: 'SandboxExpired',
  sandboxNotReady: 'SandboxNotReady',
  createPending: 'SandboxCreatePending',
  /** The aggregated layout: no node serves the claim's pool (docs/aggregated-layout.md "SandboxClaims"). */
  poolNotServed: 'PoolNotServed',
} as const;

export type ClaimReason = (typeof ClaimReasons)[keyof typeof ClaimReasons];

/** The SandboxError code of a pass that ends with a claim reason (an Outcome, a ClaimInputError). */
export const CLAIM_REASON_CODES: Readonly<Record<ClaimReason, ErrorCode>> = {
  TemplateNotFound: 'claim.template-not-found',
  WarmPoolNotFound: 'claim.warm-pool-not-found',
  InvalidMetadata: 'claim.invalid-metadata',
  EnvVarsInjectionRejected: 'claim.env-vars-injection-rejected',
  VolumeClaimTemplatesError: 'claim.volume-claim-templates-error',
  ReconcilerError: 'claim.reconciler-error',
  ClaimExpired: 'claim.claim-expired',
  SandboxMissing: 'claim.sandbox-missing',
  SandboxExpired: 'claim.sandbox-expired',
  SandboxNotReady: 'claim.sandbox-not-ready',
  SandboxCreatePending: 'claim.sandbox-create-pending',
  PoolNotServed: 'claim.pool-not-served',
};

export const CLAIM_EXPIRED_MESSAGE = 'Claim expired. Sandbox cleanup initiated.';

export function findCondition(conds: readonly Condition[] | undefined, type: string): Condition | undefined {
  return conds?.find((c) => c.type === type);
}

export interface TimeLeft {
  expired: boolean;
  /** Milliseconds until expiry; undefined when nothing expires the claim. */
  leftMs: number | undefined;
}

/** expireAt = min(shutdownTime, Finished.lastTransitionTime + ttlSecondsAfterFinished). */
export function timeLeft(
  lifecycle: Lifecycle | undefined,
  conditions: readonly Condition[] | undefined,
  nowMs: number,
): TimeLeft {
  if (!lifecycle) return { expired: false, leftMs: undefined };
  let expireAt: number | undefined;
  if (lifecycle.shutdownTime) {
    const t = Date.parse(lifecycle.shutdownTime);
    if (Number.isFinite(t)) expireAt = t;
  }
  if (lifecycle.ttlSecondsAfterFinished !== undefined) {
    const fin = findCondition(conditions, 'Finished');
    const ltt = fin?.status === 'True' ? Date.parse(fin.lastTransitionTime) : NaN;
    if (Number.isFinite(ltt) && ltt > 0) {
      const t = ltt + lifecycle.ttlSecondsAfterFinished * 1000;
      expireAt = expireAt === undefined ? t : Math.min(expireAt, t);
    }
  }
  if (expireAt === undefined) return { expired: false, leftMs: undefined };
  return { expired: nowMs >= expireAt, leftMs: Math.max(0, expireAt - nowMs) };
}

/** What the pass concluded, before it is turned into conditions. */
export type ClaimOutcome =
  | { kind: 'sandbox'; sandbox: Sandbox }
  | { kind: 'noSandbox' }
  | { kind: 'expired'; sandbox: Sandbox | undefined }
  | { kind: 'error'; reason: string; message: string; sandbox?: Sandbox | undefined; keepSandboxStatus: boolean };

function cond(
  type: string,
  status: Condition['status'],
  reason: string,
  message: string,
  generation: number | undefined,
  prev: Condition | undefined,
  now: string,
): Condition {
  const c: Condition = {
    type,
    status,
    reason,
    message,
    lastTransitionTime: prev && prev.status === status ? prev.lastTransitionTime : now,
  };
  if (generation !== undefined) c.observedGeneration = generation;
  return c;
}

function withGeneration(c: Condition, generation: number | undefined): Condition {
  if (generation !== undefined) c.observedGeneration = generation;
  else delete c.observedGeneration;
  return c;
}

/**
 * The claim status for an outcome (docs/claim-model.md "Status"). `now` is an RFC3339 timestamp for new transitions.
 */
export function claimStatusFor(claim: SandboxClaim, outcome: ClaimOutcome, now: string): SandboxClaimStatus {
  const prev = claim.status ?? {};
  const gen = claim.metadata?.generation;
  const prevReady = findCondition(prev.conditions, 'Ready');
  const prevFinished = findCondition(prev.conditions, 'Finished');
  const sandbox =
    outcome.kind === 'error' ? outcome.sandbox : outcome.kind === 'noSandbox' ? undefined : outcome.sandbox;
  let ready: Condition;
  let finished: Condition | undefined;
  switch (outcome.kind) {
    case 'error':
      ready = cond('Ready', 'False', outcome.reason, outcome.message, gen, prevReady, now);
      finished = sandbox ? findCondition(sandbox.status?.conditions, 'Finished') : undefined;
      break;
    case 'expired':
      ready = cond('Ready', 'False', ClaimReasons.claimExpired, CLAIM_EXPIRED_MESSAGE, gen, prevReady, now);
      finished = (sandbox && findCondition(sandbox.status?.conditions, 'Finished')) ?? prevFinished;
      break;
    case 'noSandbox':
      ready = cond('Ready', 'False', ClaimReasons.sandboxMissing, 'Sandbox does not exist', gen, prevReady, now);
      finished = undefined;
      break;
    case 'sandbox': {
      const sbReady = findCondition(outcome.sandbox.status?.conditions, 'Ready');
      if (sbReady?.reason === ClaimReasons.sandboxExpired)
        ready = cond(
          'Ready',
          'False',
          ClaimReasons.sandboxExpired,
          'Underlying Sandbox resource has expired independently of the Claim.',
          gen,
          prevReady,
          now,
        );
      // Forwarded as is, except observedGeneration, which names the claim's generation (newer upstream;
      // docs/claim-model.md "Status"). Keeping the Sandbox's would also rewrite the claim after every adoption, whose
      // pod-template change bumps the Sandbox's generation: one more write racing the next claim's.
      else if (sbReady) ready = withGeneration({ ...sbReady, type: 'Ready' }, gen);
      else ready = cond('Ready', 'False', ClaimReasons.sandboxNotReady, 'Sandbox is not ready', gen, prevReady, now);
      finished = findCondition(outcome.sandbox.status?.conditions, 'Finished');
      break;
    }
  }
  const conditions = [ready, ...(finished ? [{ ...finished }] : [])].sort((a, b) => a.type.localeCompare(b.type));
  const status: SandboxClaimStatus = { ...prev, conditions };
  const clear = outcome.kind === 'noSandbox' || (outcome.kind === 'error' && !outcome.keepSandboxStatus && !sandbox);
  if (sandbox?.metadata?.name) {
    const s: NonNullable<SandboxClaimStatus['sandbox']> = { name: sandbox.metadata.name };
    const ips = sandbox.status?.podIPs;
    if (ips?.length) s.podIPs = [...ips];
    // Mirrored (upstream 1.0): in-cluster SDK clients reach the Sandbox's Service from the claim alone.
    const fqdn = sandbox.status?.serviceFQDN;
    if (fqdn) s.serviceFQDN = fqdn;
    status.sandbox = s;
  } else if (clear) delete status.sandbox;
  else if (outcome.kind === 'expired' && status.sandbox?.serviceFQDN !== undefined) {
    // An expired claim whose Sandbox is gone: its Service went with it, so the name no longer resolves (name and
    // podIPs stay, as upstream keeps them, to say what the claim had).
    const { serviceFQDN: _gone, ...kept } = status.sandbox;
    status.sandbox = kept;
  }
  return status;
}

/** Status equality with conditions compared in type order. */
export function sameStatus(a: SandboxClaimStatus | undefined, b: SandboxClaimStatus | undefined): boolean {
  const norm = (s: SandboxClaimStatus | undefined) =>
    JSON.parse(
      JSON.stringify({ ...s, conditions: [...(s?.conditions ?? [])].sort((x, y) => x.type.localeCompare(y.type)) }),
    ) as unknown;
  return isDeepStrictEqual(norm(a), norm(b));
}

export function isReady(status: { conditions?: readonly Condition[] } | undefined): boolean {
  return findCondition(status?.conditions, 'Ready')?.status === 'True';
}
