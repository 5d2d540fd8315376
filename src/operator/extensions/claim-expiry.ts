/**
 * An expired claim: `ClaimExpired` is persisted first, then the shutdown policy runs: `Delete` /
 * `DeleteForeground` delete the claim, `Retain` deletes the Sandbox the claim controls and keeps the claim.
 */
import { kubeTime } from '../../api/index.js';
import {
  isConflict,
  isControlledBy,
  isNotFound,
  Sandboxes,
  SandboxClaims,
  type ReconcileResult,
} from '../../kube/index.js';
import type { ClaimContext } from './claim-context.js';
import { claimStatusFor, ClaimReasons, findCondition } from '../../api/claim-status.js';
import type { ClaimObj } from './support.js';

/** docs/claim-model.md "Expiry". */
export async function reconcileExpired(ctx: ClaimContext, claim: ClaimObj): Promise<ReconcileResult | void> {
  const ns = claim.metadata.namespace!;
  const policy = claim.spec.lifecycle?.shutdownPolicy ?? 'Retain';
  const ready = findCondition(claim.status?.conditions, 'Ready');
  const sbName = claim.status?.sandbox?.name || claim.metadata.name!;
  const sb = ctx.bindings.view(ns, sbName, claim.metadata.uid!);
  if (ready?.reason !== ClaimReasons.claimExpired) {
    const status = claimStatusFor(
      claim,
      { kind: 'expired', sandbox: sb && isControlledBy(sb, claim) ? sb : undefined },
      kubeTime(),
    );
    const after = await ctx.writes.writeStatus(claim, status);
    await ctx.writes.writeAnnotations(after ?? claim, undefined);
    ctx.events.record(claim, SandboxClaims, {
      type: 'Normal',
      reason: 'ClaimExpired',
      action: 'Claim Expired',
      note: 'Claim expired',
    });
    return { requeueAfterMs: 1 };
  }
  if (policy === 'Delete' || policy === 'DeleteForeground') {
    ctx.events.record(claim, SandboxClaims, {
      type: 'Normal',
      reason: 'ClaimExpired',
      action: 'Deleting',
      note: `Deleting Claim (ShutdownPolicy=${policy})`,
    });
    await ctx.writes.writeAnnotations(claim, undefined);
    try {
      await ctx.d.manager.client.delete(
        SandboxClaims,
        ns,
        claim.metadata.name!,
        policy === 'DeleteForeground' ? { propagationPolicy: 'Foreground' } : {},
      );
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
    return;
  }
  if (!sb) return;
  if (!isControlledBy(sb, claim)) {
    const status = claimStatusFor(
      claim,
      {
        kind: 'error',
        reason: ClaimReasons.claimExpired,
        message: `Claim expired. sandbox "${sbName}" is not controlled by claim "${claim.metadata.name}"; deletion skipped.`,
        keepSandboxStatus: true,
      },
      kubeTime(),
    );
    await ctx.writes.writeStatus(claim, status);
    return;
  }
  // Keep Finished (and the rest of the expired status) in step with the Sandbox until it is gone.
  const status = claimStatusFor(claim, { kind: 'expired', sandbox: sb }, kubeTime());
  await ctx.writes.writeStatus(claim, status);
  if (!sb.metadata.deletionTimestamp) {
    try {
      await ctx.d.manager.client.delete(Sandboxes, ns, sb.metadata.name!, {
        preconditions: { uid: sb.metadata.uid },
      });
    } catch (err) {
      if (!isNotFound(err) && !isConflict(err)) throw err;
    }
  }
}
