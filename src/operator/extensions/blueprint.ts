/**
 * What a SandboxTemplate stamps onto a Sandbox (docs/extensions.md "Template", "Warm pool"): the blueprint, its hash,
 * the template-level secure defaults, and the drift test the warm pool's update strategies use. Pure functions; no API
 * access.
 */
import { isDeepStrictEqual } from 'node:util';
import {
  fnv1a32,
  type PersistentVolumeClaimTemplate,
  type PodSpec,
  type PodTemplate,
  type Sandbox,
  type SandboxTemplate,
} from '../../api/index.js';

/** The part of a template every Sandbox built from it carries (Go's SandboxBlueprint). */
export interface Blueprint {
  podTemplate: PodTemplate;
  volumeClaimTemplates?: PersistentVolumeClaimTemplate[];
  service?: boolean;
}

export function blueprintOf(template: SandboxTemplate): Blueprint {
  const { podTemplate, volumeClaimTemplates, service } = template.spec;
  const out: Blueprint = { podTemplate };
  if (volumeClaimTemplates !== undefined) out.volumeClaimTemplates = volumeClaimTemplates;
  if (service !== undefined) out.service = service;
  return out;
}

/** hash(JSON(blueprint)), the `sandbox-template-hash` label value. */
export function blueprintHash(template: SandboxTemplate): string {
  return fnv1a32(JSON.stringify(blueprintOf(template)));
}

export const SECURE_DEFAULT_NAMESERVERS = ['8.8.8.8', '1.1.1.1'] as const;

/** True when the template's NetworkPolicy is managed and uses the secure default rules (so DNS is overridden). */
function usesSecureDefaultNetwork(template: SandboxTemplate): boolean {
  const managed = (template.spec.networkPolicyManagement ?? 'Managed') === 'Managed';
  return managed && template.spec.networkPolicy === undefined;
}

/**
 * Template secure defaults (docs/extensions.md "Template"), applied to Sandboxes the claim and pool build — never to
 * hand-made ones: no service-account token unless asked for, and public resolvers when the default NetworkPolicy blocks
 * cluster DNS.
 */
export function withSecureDefaults(spec: PodSpec, template: SandboxTemplate): PodSpec {
  const out: PodSpec = structuredClone(spec);
  out.automountServiceAccountToken ??= false;
  if (usesSecureDefaultNetwork(template) && !out.dnsPolicy) {
    out.dnsPolicy = 'None';
    out.dnsConfig = { nameservers: [...SECURE_DEFAULT_NAMESERVERS] };
  }
  return out;
}

/** A deep copy of the blueprint with the secure defaults applied to its pod spec. */
export function sandboxSpecFromTemplate(template: SandboxTemplate): Blueprint {
  const bp = structuredClone(blueprintOf(template));
  bp.podTemplate.spec = withSecureDefaults(bp.podTemplate.spec, template);
  return bp;
}

const vctKey = (v: PersistentVolumeClaimTemplate) => ({ name: v.metadata?.name ?? '', spec: v.spec });

/**
 * Semantic equality of a member's spec with the template (docs/extensions.md "Warm pool"): pod spec after secure
 * defaults, VCT name+spec index by index, and the service tri-state. Pod-template metadata never makes a member stale.
 */
export function matchesTemplate(member: Sandbox, template: SandboxTemplate): boolean {
  const want = withSecureDefaults(template.spec.podTemplate.spec, template);
  if (!isDeepStrictEqual(normalize(want), normalize(member.spec.podTemplate.spec))) return false;
  const a = template.spec.volumeClaimTemplates ?? [];
  const b = member.spec.volumeClaimTemplates ?? [];
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++)
    if (!isDeepStrictEqual(normalize(vctKey(a[i]!)), normalize(vctKey(b[i]!)))) return false;
  return template.spec.service === member.spec.service;
}

/** JSON round trip: drops undefined-valued keys so absent and undefined compare equal. */
function normalize(v: unknown): unknown {
  return v === undefined ? undefined : (JSON.parse(JSON.stringify(v)) as unknown);
}
