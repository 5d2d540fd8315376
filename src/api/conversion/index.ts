/**
 * v1alpha1 <-> v1beta1 conversion of every agent-sandbox kind (hub v1beta1), as served by the conversion
 * webhook. {@link convertObject} is the single entry point for one object.
 */
import {
  CONVERTIBLE_RESOURCES,
  HUB_VERSION,
  parseApiVersion,
  SandboxClaimResource,
  SandboxResource,
  SandboxTemplateResource,
  SandboxWarmPoolResource,
  SPOKE_VERSION,
  type ResourceDef,
} from '../scheme.js';
import { ConversionError } from './errors.js';
import type { Conversion, Convertible } from './round-trip.js';
import { sandboxConversion } from './sandbox.js';
import { sandboxClaimConversion } from './sandbox-claim.js';
import { sandboxTemplateConversion } from './sandbox-template.js';
import { sandboxWarmPoolConversion } from './sandbox-warm-pool.js';

export { ConversionError } from './errors.js';
export { sandboxConversion } from './sandbox.js';
export { sandboxTemplateConversion } from './sandbox-template.js';
export { sandboxWarmPoolConversion } from './sandbox-warm-pool.js';
export {
  sandboxClaimConversion,
  claimV1alpha1Intent,
  resolveShadowPoolTemplate,
  shadowPoolName,
  stripRandomSuffix,
  WARMPOOL_DEFAULT,
  WARMPOOL_NONE,
  type ClaimV1alpha1Intent,
} from './sandbox-claim.js';
export type { Conversion } from './round-trip.js';

// The conversions are typed per kind; the dispatcher works on unknown JSON.
type AnyConversion = Conversion<Convertible, Convertible>;

const conversions = new Map<ResourceDef, AnyConversion>([
  [SandboxResource, sandboxConversion as unknown as AnyConversion],
  [SandboxTemplateResource, sandboxTemplateConversion as unknown as AnyConversion],
  [SandboxWarmPoolResource, sandboxWarmPoolConversion as unknown as AnyConversion],
  [SandboxClaimResource, sandboxClaimConversion as unknown as AnyConversion],
]);

/**
 * Converts one object to `desiredApiVersion` (same group). Objects already at that version are returned as
 * they are. Throws {@link ConversionError} for anything it cannot convert.
 */
export function convertObject(object: unknown, desiredApiVersion: string): Record<string, unknown> {
  if (object === null || typeof object !== 'object' || Array.isArray(object)) {
    throw new ConversionError('object is not a JSON object');
  }
  const obj = object as Record<string, unknown>;
  const { apiVersion, kind } = obj;
  if (typeof apiVersion !== 'string' || typeof kind !== 'string') {
    throw new ConversionError('object has no apiVersion/kind');
  }
  const from = parseApiVersion(apiVersion);
  const to = parseApiVersion(desiredApiVersion);
  const resource = CONVERTIBLE_RESOURCES.find((r) => r.group === from.group && r.kind === kind);
  if (!resource) throw new ConversionError(`no conversion for kind ${kind} in group ${JSON.stringify(from.group)}`);
  if (to.group !== from.group) {
    throw new ConversionError(`cannot convert ${apiVersion} ${kind} to another group (${desiredApiVersion})`);
  }
  const known = [HUB_VERSION, SPOKE_VERSION] as string[];
  for (const v of [from.version, to.version]) {
    if (!known.includes(v)) throw new ConversionError(`unknown version ${resource.group}/${v} for ${kind}`);
  }
  if (!isPlainObject(obj['spec'])) throw new ConversionError(`${kind} ${nameOf(obj)}: spec must be an object`);
  if (from.version === to.version) return obj;
  const conversion = conversions.get(resource)!;
  const converted = from.version === SPOKE_VERSION ? conversion.toHub(obj) : conversion.fromHub(obj);
  return converted as Record<string, unknown>;
}

function isPlainObject(v: unknown): boolean {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function nameOf(obj: Record<string, unknown>): string {
  const meta = obj['metadata'] as { namespace?: string; name?: string } | undefined;
  return meta?.namespace ? `${meta.namespace}/${meta.name ?? ''}` : (meta?.name ?? '<unnamed>');
}
