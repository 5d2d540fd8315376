/**
 * Adoption of a warm pool Sandbox by a claim: which Sandboxes are adoptable, the one resourceVersion-guarded merge
 * patch that moves a Sandbox from its pool to the claim, and the loop over the pool's candidates (a 409 moves on to
 * the next candidate at once).
 */
import {
  AnnotationKeys,
  EXTENSIONS_GROUP,
  fnv1a32,
  HUB_VERSION,
  LabelKeys,
  type PodMetadata,
} from '../../api/index.js';
import {
  controllerOf,
  controllerRef,
  isConflict,
  isNotFound,
  mergePatch,
  Sandboxes,
  SandboxClaims,
} from '../../kube/index.js';
import type { ClaimContext } from './claim-context.js';
import { desiredPodMetadata } from './claim-metadata.js';
import { normalizeCreatedBy } from './metrics.js';
import { isNewer, isSandboxReady, type ClaimObj, type PoolObj, type SandboxObj, type TemplateObj } from './support.js';

const HUB_API_VERSION = `${EXTENSIONS_GROUP}/${HUB_VERSION}`;
/** Adoption attempts per pass before falling back to a cold start. */
const MAX_ADOPTION_ATTEMPTS = 16;

/**
 * The pool a warm Sandbox may be adopted from, or undefined when it is not adoptable (docs/extensions.md "Claim: the L1
 * fast path").
 */
export function adoptablePool(sb: SandboxObj): string | undefined {
  if (sb.metadata.deletionTimestamp) return undefined;
  const l = sb.metadata.labels;
  if (!l?.[LabelKeys.warmPoolSandbox] || !l[LabelKeys.sandboxTemplateRefHash]) return undefined;
  const ref = controllerOf(sb);
  if (!ref || ref.kind !== 'SandboxWarmPool' || ref.apiVersion !== HUB_API_VERSION) return undefined;
  return ref.name;
}

/** Offer a Sandbox to the candidate queues as the informer (or a conflict) shows it. */
export function offerCandidate(ctx: ClaimContext, sb: SandboxObj): void {
  ctx.candidates.observe(
    sb.metadata.namespace!,
    sb.metadata.name!,
    adoptablePool(sb),
    sb.status?.nodeName ?? '',
    isSandboxReady(sb),
  );
}

/** Adopt a warm candidate of `pool` for the claim, or undefined when the pool has none to give. */
export async function adoptWarm(
  ctx: ClaimContext,
  claim: ClaimObj,
  pool: PoolObj,
  template: TemplateObj | undefined,
): Promise<SandboxObj | undefined> {
  const ns = claim.metadata.namespace!;
  const uid = claim.metadata.uid!;
  const client = ctx.d.manager.client;
  // With a template the claim's pod metadata does not depend on the candidate: a conflict (metadata-conflict) is
  // the claim's error, found before any candidate is taken.
  const templateMetadata = template
    ? desiredPodMetadata(claim, template.spec.podTemplate.metadata, template.metadata.name!)
    : undefined;
  for (let attempt = 0; attempt < MAX_ADOPTION_ATTEMPTS; attempt++) {
    const pick = ctx.candidates.take(ns, pool.metadata.name!);
    if (!pick) return undefined;
    const sb = ctx.d.sandboxes.getByName(ns, pick.name);
    if (!sb || adoptablePool(sb) !== pool.metadata.name) {
      ctx.candidates.settle(ns, pick.name);
      continue;
    }
    let patch: unknown;
    try {
      patch = adoptionPatch(claim, sb, template, templateMetadata);
    } catch (err) {
      // Nothing was written: the candidate goes back to the queue, else it would stay in flight for ever.
      ctx.candidates.settle(ns, pick.name);
      offerCandidate(ctx, sb);
      throw err;
    }
    try {
      const out = await client.patch<SandboxObj>(Sandboxes, ns, pick.name, patch, 'merge');
      ctx.bindings.remember(uid, out);
      ctx.candidates.settle(ns, pick.name);
      // No SandboxAdopted event: one more write per claim, and agent_sandbox_claim_creation_total counts them.
      ctx.metrics.claimCreation.inc({
        namespace: ns,
        sandbox_template: sb.metadata.annotations?.[AnnotationKeys.sandboxTemplateRef] ?? '__unknown__',
        launch_type: 'warm',
        warmpool_name: pool.metadata.name,
        pod_condition: isSandboxReady(sb) ? 'ready' : 'not_ready',
        created_by: normalizeCreatedBy(claim.metadata.labels?.[LabelKeys.createdBy]),
      });
      return out;
    } catch (err) {
      ctx.candidates.settle(ns, pick.name);
      if (isConflict(err)) {
        // Changed since we saw it (maybe adopted elsewhere): move on at once. The cache's view is offered again
        // only when it is newer than the one that failed; the same stale view would only 409 again, and the
        // informer's next event for it offers it then.
        const latest = ctx.d.sandboxes.getByName(ns, pick.name);
        if (latest && isNewer(latest, sb)) offerCandidate(ctx, latest);
        continue;
      }
      if (isNotFound(err)) continue;
      // Unknown outcome: the next pass asks the apiserver before adopting anything else.
      ctx.bindings.uncertainAdoption(uid, pick.name);
      throw err;
    }
  }
  return undefined;
}

/**
 * The adoption patch: guarded by the candidate's resourceVersion, it makes the claim the only controller, drops the
 * pool's labels and carries the claim's pod-template metadata.
 */
function adoptionPatch(
  claim: ClaimObj,
  sb: SandboxObj,
  template: TemplateObj | undefined,
  templateMetadata: PodMetadata | undefined,
): unknown {
  const l = sb.metadata.labels ?? {};
  const templateName = template?.metadata.name ?? sb.metadata.annotations?.[AnnotationKeys.sandboxTemplateRef] ?? '';
  const createdBy = claim.metadata.labels?.[LabelKeys.createdBy];
  let ptMetadata = templateMetadata;
  if (!ptMetadata) {
    const base = structuredClone(sb.spec.podTemplate.metadata ?? {});
    if (base.annotations?.[AnnotationKeys.safeToEvict] === 'true') delete base.annotations[AnnotationKeys.safeToEvict];
    for (const k of [LabelKeys.warmPoolSandbox, LabelKeys.sandboxTemplateHash, LabelKeys.sandboxPodTemplateHash])
      delete base.labels?.[k];
    ptMetadata = desiredPodMetadata(claim, base, templateName);
  }
  const keptRefHash = l[LabelKeys.sandboxTemplateRefHash];
  if (!template && keptRefHash)
    ptMetadata.labels = { ...ptMetadata.labels, [LabelKeys.sandboxTemplateRefHash]: keptRefHash };
  const trace = claim.metadata.annotations?.[AnnotationKeys.traceContext];
  return {
    metadata: {
      resourceVersion: sb.metadata.resourceVersion,
      labels: {
        [LabelKeys.warmPoolSandbox]: null,
        [LabelKeys.sandboxTemplateHash]: null,
        [LabelKeys.sandboxPodTemplateHash]: null,
        [LabelKeys.launchType]: 'warm',
        [LabelKeys.claimUid]: claim.metadata.uid,
        [LabelKeys.sandboxTemplateRefHash]: l[LabelKeys.sandboxTemplateRefHash] ?? fnv1a32(templateName),
        [LabelKeys.createdBy]: createdBy ?? null,
      },
      ownerReferences: [controllerRef(claim, SandboxClaims)],
      annotations: {
        [AnnotationKeys.podName]: sb.metadata.name,
        ...(trace ? { [AnnotationKeys.traceContext]: trace } : {}),
      },
    },
    spec: { podTemplate: { metadata: mergePatch(sb.spec.podTemplate.metadata ?? {}, ptMetadata) ?? {} } },
  };
}
