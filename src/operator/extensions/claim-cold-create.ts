/**
 * Cold start: a claim that cannot (or must not) take a warm Sandbox gets a new one, named like the claim, built from
 * its template with the claim's env, volume claim templates and pod metadata, and controlled by the claim.
 */
import { AnnotationKeys, fnv1a32, LabelKeys, type Sandbox } from '../../api/index.js';
import { SandboxError } from '../../errors.js';
import {
  controllerRef,
  isAlreadyExists,
  isControlledBy,
  isNotFound,
  Sandboxes,
  SandboxClaims,
} from '../../kube/index.js';
import { sandboxSpecFromTemplate } from './blueprint.js';
import { Outcome, type ClaimContext } from './claim-context.js';
import { desiredPodMetadata } from './claim-metadata.js';
import { ClaimReasons } from '../../api/claim-status.js';
import { injectEnv, mergeVolumeClaimTemplates } from '../../api/claim-injection.js';
import { normalizeCreatedBy } from './metrics.js';
import type { ClaimObj, SandboxObj, TemplateObj } from './support.js';

const CREATE_PENDING_REQUEUE_MS = 200;

export async function createCold(ctx: ClaimContext, claim: ClaimObj, template: TemplateObj): Promise<SandboxObj> {
  const ns = claim.metadata.namespace!;
  const templateName = template.metadata.name!;
  const spec = sandboxSpecFromTemplate(template);
  const vcts = mergeVolumeClaimTemplates(
    template.spec.volumeClaimTemplates,
    claim.spec.volumeClaimTemplates,
    template.spec.volumeClaimTemplatesPolicy,
  );
  const podSpec = injectEnv(spec.podTemplate.spec, claim.spec.env, template.spec.envVarsInjectionPolicy);
  const createdBy = claim.metadata.labels?.[LabelKeys.createdBy];
  const trace = claim.metadata.annotations?.[AnnotationKeys.traceContext];
  const body: Sandbox = {
    apiVersion: `${Sandboxes.group}/${Sandboxes.version}`,
    kind: Sandboxes.kind,
    metadata: {
      name: claim.metadata.name,
      namespace: ns,
      labels: {
        [LabelKeys.claimUid]: claim.metadata.uid!,
        [LabelKeys.launchType]: 'cold',
        [LabelKeys.sandboxTemplateRefHash]: fnv1a32(templateName),
        ...(createdBy !== undefined ? { [LabelKeys.createdBy]: createdBy } : {}),
      },
      annotations: {
        [AnnotationKeys.sandboxTemplateRef]: templateName,
        ...(trace ? { [AnnotationKeys.traceContext]: trace } : {}),
      },
      ownerReferences: [controllerRef(claim, SandboxClaims)],
    },
    spec: {
      ...spec,
      podTemplate: {
        metadata: desiredPodMetadata(claim, spec.podTemplate.metadata, templateName),
        spec: podSpec,
      },
      ...(vcts ? { volumeClaimTemplates: vcts } : {}),
    },
  };
  if (!vcts) delete body.spec.volumeClaimTemplates;
  let out: SandboxObj;
  try {
    out = await ctx.d.manager.client.create<SandboxObj>(Sandboxes, body as SandboxObj);
  } catch (err) {
    if (isAlreadyExists(err)) return readBack(ctx, claim);
    throw new SandboxError('claim.create', `sandbox create error: ${(err as Error).message}`, { cause: err });
  }
  ctx.bindings.remember(claim.metadata.uid!, out);
  // No SandboxProvisioned event: agent_sandbox_claim_creation_total{launch_type="cold"} counts them.
  ctx.metrics.claimCreation.inc({
    namespace: ns,
    sandbox_template: templateName,
    launch_type: 'cold',
    warmpool_name: claim.spec.warmPoolRef.name,
    pod_condition: 'not_ready',
    created_by: normalizeCreatedBy(createdBy),
  });
  return out;
}

/**
 * The create answered AlreadyExists although the caches knew no Sandbox of that name (docs/claim-model.md "Cold
 * create"): one GET decides, as agent-sandbox 1.0 does. Ours (this claim its controller, not deleting): adopted as
 * the claim's Sandbox on this pass, so a claim whose earlier create committed unseen (a lost response, a lagging
 * cache) does not wait on the cache. Someone else's: the same refusal as a Sandbox of that name the cache shows.
 * Gone again, or deleting: created anew on a later pass.
 */
async function readBack(ctx: ClaimContext, claim: ClaimObj): Promise<SandboxObj> {
  const name = claim.metadata.name!;
  let live: SandboxObj | undefined;
  try {
    live = await ctx.d.manager.client.get<SandboxObj>(Sandboxes, claim.metadata.namespace, name);
  } catch (err) {
    if (!isNotFound(err))
      throw new SandboxError('claim.create', `sandbox read-back error: ${(err as Error).message}`, { cause: err });
  }
  if (!live || live.metadata.deletionTimestamp)
    throw new Outcome(
      ClaimReasons.createPending,
      'Sandbox already created; waiting for cache to converge',
      CREATE_PENDING_REQUEUE_MS,
      true,
    );
  if (!isControlledBy(live, claim)) throw notControlled(name);
  ctx.bindings.remember(claim.metadata.uid!, live);
  return live;
}

/** A Sandbox named like the claim that the claim does not control: only the user can resolve it. */
export function notControlled(name: string): Outcome {
  return new Outcome(
    ClaimReasons.reconcilerError,
    `Error seen: sandbox "${name}" is not controlled by claim "${name}". Please use a different claim name or delete the sandbox manually`,
    undefined,
    true,
  );
}
