/**
 * The claim's share of its Sandbox's metadata: the pod-template labels and annotations a claim asks for (used by
 * adoption and cold create), and the sync that carries later edits of the template or the claim to a bound Sandbox.
 */
import { AnnotationKeys, fnv1a32, LabelKeys, type PodMetadata } from '../../api/index.js';
import { SandboxError } from '../../errors.js';
import { mergePatch, Sandboxes } from '../../kube/index.js';
import type { ClaimContext } from './claim-context.js';
import { mergePodMetadata } from '../../api/claim-injection.js';
import type { ClaimObj, SandboxObj, TemplateObj } from './support.js';

/** The claim-side pod-template metadata (docs/claim-model.md "Metadata sync"). */
export function desiredPodMetadata(claim: ClaimObj, base: PodMetadata | undefined, templateName: string): PodMetadata {
  const system: PodMetadata = {
    labels: { [LabelKeys.claimUid]: claim.metadata.uid!, [LabelKeys.sandboxTemplateRefHash]: fnv1a32(templateName) },
  };
  const createdBy = claim.metadata.labels?.[LabelKeys.createdBy];
  const md = mergePodMetadata(
    { labels: { ...base?.labels, ...system.labels }, annotations: base?.annotations },
    claim.spec.additionalPodMetadata,
  );
  if (createdBy !== undefined) md.labels = { ...md.labels, [LabelKeys.createdBy]: createdBy };
  else if (md.labels) delete md.labels[LabelKeys.createdBy];
  return md;
}

/**
 * Later edits of template pod metadata or claim metadata reach the bound Sandbox (docs/claim-model.md "Metadata sync").
 */
export async function syncMetadata(
  ctx: ClaimContext,
  claim: ClaimObj,
  sb: SandboxObj,
  template: TemplateObj | undefined,
): Promise<SandboxObj> {
  const labels = sb.metadata.labels ?? {};
  const templateName = template?.metadata.name;
  const want: Record<string, string | null> = {};
  if (!labels[LabelKeys.launchType]) {
    const warm =
      claim.metadata.annotations?.[AnnotationKeys.sandboxName] === sb.metadata.name ||
      sb.metadata.name !== claim.metadata.name;
    want[LabelKeys.launchType] = warm ? 'warm' : 'cold';
  }
  let ptPatch: unknown;
  if (templateName) {
    const refHash = fnv1a32(templateName);
    if (labels[LabelKeys.sandboxTemplateRefHash] !== refHash) want[LabelKeys.sandboxTemplateRefHash] = refHash;
    const createdBy = claim.metadata.labels?.[LabelKeys.createdBy];
    if ((labels[LabelKeys.createdBy] ?? null) !== (createdBy ?? null)) want[LabelKeys.createdBy] = createdBy ?? null;
    const base = template.spec.podTemplate.metadata;
    const desired = desiredPodMetadata(claim, base, templateName);
    // Keys the Sandbox carries for itself (safe-to-evict from the template only) are left to the comparison.
    ptPatch = mergePatch(sb.spec.podTemplate.metadata ?? {}, desired);
  } else if (claim.spec.additionalPodMetadata) {
    throw new SandboxError(
      'claim.metadata',
      `failed to get template for metadata propagation: SandboxTemplate not found`,
    );
  }
  if (!Object.keys(want).length && ptPatch === undefined) return sb;
  const patch: Record<string, unknown> = {};
  if (Object.keys(want).length) patch.metadata = { labels: want };
  if (ptPatch !== undefined) patch.spec = { podTemplate: { metadata: ptPatch } };
  const out = await ctx.d.manager.client.patch<SandboxObj>(
    Sandboxes,
    sb.metadata.namespace,
    sb.metadata.name!,
    patch,
    'merge',
  );
  ctx.bindings.remember(claim.metadata.uid!, out);
  return out;
}
