/**
 * SandboxClaim v1alpha1 <-> v1beta1 (docs/api.md "The core mapping per kind"), the one mapping that is semantically
 * lossy upstream.
 *
 * v1alpha1 names a template and a pool intent (`warmpool`: `none`, `default` or a pool name); v1beta1 names only
 * a pool (`warmPoolRef`). Going beyond the upstream (docs/api.md "SandboxClaim: beyond the upstream"):
 * - The template name survives every round trip: the v1alpha1-state annotation
 *   (`{"spec":{"sandboxTemplateRef":{"name":…},"warmpool":…}}`, a subset of the v1alpha1 object, so the
 *   upstream's readers still parse it) is written whenever the hub fields alone would not give the v1alpha1 fields
 *   back; and a hub claim without it shows the template recorded by the claim controller in the
 *   `agents.x-k8s.io/sandbox-template-ref` annotation (contract in docs/api.md) before falling back to the
 *   pool name.
 * - `shadow-pool-<template>` pools need not exist: {@link resolveShadowPoolTemplate} lets the claim controller
 *   go straight to the template (docs/api.md).
 */
import { AnnotationKeys, ConversionKeys, SHADOW_POOL_PREFIX } from '../keys.js';
import type { PersistentVolumeClaimTemplate } from '../common.js';
import { apiVersionOf, HUB_VERSION, SandboxClaimResource, SPOKE_VERSION } from '../scheme.js';
import type { SandboxClaim, SandboxClaimV1alpha1 } from '../sandbox-claim.js';
import { ConversionError } from './errors.js';
import { annotation, editAnnotations, isPlainObject, put } from './object-edit.js';
import { envelope, exactRoundTrip, type Conversion } from './round-trip.js';

const STATE = ConversionKeys.sandboxClaimV1alpha1State;
const HUB_STATE = ConversionKeys.sandboxClaimV1beta1State;
const VCTS = ConversionKeys.sandboxClaimVolumeClaimTemplates;
const HUB_API_VERSION = apiVersionOf(SandboxClaimResource, HUB_VERSION);
const SPOKE_API_VERSION = apiVersionOf(SandboxClaimResource, SPOKE_VERSION);

/** `warmpool` values that do not name a pool. */
export const WARMPOOL_NONE = 'none';
export const WARMPOOL_DEFAULT = 'default';

function isSpecificPool(warmpool: string | undefined): warmpool is string {
  return warmpool !== undefined && warmpool !== '' && warmpool !== WARMPOOL_NONE && warmpool !== WARMPOOL_DEFAULT;
}

/** Cut at the last `-` (a warm Sandbox is named `<pool>-<random>`); unchanged without one. */
export function stripRandomSuffix(name: string): string {
  const i = name.lastIndexOf('-');
  return i < 0 ? name : name.slice(0, i);
}

/** `shadow-pool-<t>` -> `<t>`; undefined for any other pool name. */
export function resolveShadowPoolTemplate(poolName: string): string | undefined {
  return poolName.startsWith(SHADOW_POOL_PREFIX) && poolName.length > SHADOW_POOL_PREFIX.length
    ? poolName.slice(SHADOW_POOL_PREFIX.length)
    : undefined;
}

export function shadowPoolName(templateName: string): string {
  return `${SHADOW_POOL_PREFIX}${templateName}`;
}

/** What a v1alpha1 client asked for, as recorded on a hub claim (undefined when it was not written via v1alpha1). */
export interface ClaimV1alpha1Intent {
  templateName: string | undefined;
  warmpool: string | undefined;
}

function parseState(raw: string): ClaimV1alpha1Intent {
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch (err) {
    throw new ConversionError(`invalid ${STATE} annotation: ${(err as Error).message}`, { cause: err });
  }
  const spec = isPlainObject(parsed) ? parsed['spec'] : undefined;
  const ref = isPlainObject(spec) ? spec['sandboxTemplateRef'] : undefined;
  const name = isPlainObject(ref) ? ref['name'] : undefined;
  const warmpool = isPlainObject(spec) ? spec['warmpool'] : undefined;
  return {
    templateName: typeof name === 'string' ? name : undefined,
    warmpool: typeof warmpool === 'string' ? warmpool : undefined,
  };
}

/** The v1alpha1 intent stored on a hub claim, if it was written through v1alpha1 (for the claim controller). */
export function claimV1alpha1Intent(claim: SandboxClaim): ClaimV1alpha1Intent | undefined {
  const raw = annotation(claim.metadata, STATE);
  if (raw === undefined) return undefined;
  try {
    return parseState(raw);
  } catch {
    return undefined;
  }
}

/** v1alpha1 `sandboxTemplateRef.name` and `warmpool` for a hub claim (plus the template hint). */
function alphaRefs(hub: SandboxClaim): ClaimV1alpha1Intent {
  const pool = hub.spec.warmPoolRef.name;
  const shadowOf = resolveShadowPoolTemplate(pool);
  const hinted = annotation(hub.metadata, AnnotationKeys.sandboxTemplateRef);
  const plain: ClaimV1alpha1Intent =
    shadowOf !== undefined
      ? { templateName: shadowOf, warmpool: WARMPOOL_DEFAULT }
      : { templateName: hinted !== undefined && hinted !== '' ? hinted : pool, warmpool: pool };
  const raw = annotation(hub.metadata, STATE);
  if (raw === undefined) return plain;
  const stashed = parseState(raw);
  const templateName = stashed.templateName ?? plain.templateName;
  const expected = isSpecificPool(stashed.warmpool) ? stashed.warmpool : stashed.templateName;
  const sandboxName = hub.status?.sandbox?.name;
  const matches =
    expected !== undefined &&
    (pool === expected ||
      pool === shadowPoolName(expected) ||
      (sandboxName !== undefined &&
        sandboxName !== '' &&
        (pool === sandboxName || pool === stripRandomSuffix(sandboxName))));
  return { templateName, warmpool: matches ? stashed.warmpool : pool };
}

/** The warmPoolRef of a v1alpha1 claim (docs/api.md "The core mapping per kind"). */
function hubPoolName(spoke: SandboxClaimV1alpha1): string {
  const warmpool = spoke.spec.warmpool;
  if (isSpecificPool(warmpool)) return warmpool;
  const sandboxName = spoke.status?.sandbox?.name;
  if (sandboxName !== undefined && sandboxName !== '' && sandboxName !== spoke.metadata?.name) {
    return stripRandomSuffix(sandboxName);
  }
  return shadowPoolName(spoke.spec.sandboxTemplateRef.name);
}

function hubToSpoke(hub: SandboxClaim): SandboxClaimV1alpha1 {
  const refs = alphaRefs(hub);
  const s = hub.spec;
  const spec = { sandboxTemplateRef: { name: refs.templateName ?? '' } } as SandboxClaimV1alpha1['spec'];
  put(spec, 'warmpool', refs.warmpool);
  put(spec, 'lifecycle', s.lifecycle);
  put(spec, 'additionalPodMetadata', s.additionalPodMetadata);
  put(spec, 'env', s.env);
  const out: SandboxClaimV1alpha1 = { ...envelope(hub, SPOKE_API_VERSION, [STATE, HUB_STATE, VCTS]), spec };
  if (s.volumeClaimTemplates !== undefined) {
    out.metadata = editAnnotations(out.metadata, [], { [VCTS]: JSON.stringify(s.volumeClaimTemplates) });
  }
  put(out, 'status', hub.status);
  return out;
}

function spokeToHub(spoke: SandboxClaimV1alpha1): SandboxClaim {
  const s = spoke.spec;
  const spec: SandboxClaim['spec'] = { warmPoolRef: { name: hubPoolName(spoke) } };
  put(spec, 'lifecycle', s.lifecycle);
  put(spec, 'additionalPodMetadata', s.additionalPodMetadata);
  put(spec, 'env', s.env);
  const rawVcts = annotation(spoke.metadata, VCTS);
  if (rawVcts !== undefined) {
    let vcts: unknown;
    try {
      vcts = JSON.parse(rawVcts);
    } catch (err) {
      throw new ConversionError(`invalid ${VCTS} annotation: ${(err as Error).message}`, { cause: err });
    }
    if (!Array.isArray(vcts)) throw new ConversionError(`invalid ${VCTS} annotation: not a JSON array`);
    spec.volumeClaimTemplates = vcts as PersistentVolumeClaimTemplate[];
  }
  const hub: SandboxClaim = { ...envelope(spoke, HUB_API_VERSION, [STATE, HUB_STATE, VCTS]), spec };
  put(hub, 'status', spoke.status);
  const implied = alphaRefs(hub);
  if (implied.templateName !== s.sandboxTemplateRef.name || implied.warmpool !== s.warmpool) {
    const stateSpec: Record<string, unknown> = { sandboxTemplateRef: { name: s.sandboxTemplateRef.name } };
    if (s.warmpool !== undefined) stateSpec['warmpool'] = s.warmpool;
    hub.metadata = editAnnotations(hub.metadata, [], { [STATE]: JSON.stringify({ spec: stateSpec }) });
  }
  return hub;
}

export const sandboxClaimConversion: Conversion<SandboxClaim, SandboxClaimV1alpha1> = exactRoundTrip({
  hubStateKey: HUB_STATE,
  hubToSpoke,
  spokeToHub,
});
