/**
 * A claimed sandbox's egress policy as sandboxd's API takes it (docs/sandboxd-api.md "Network policy"): the `network`
 * of a claim, and `PUT /v1/sandboxes/{id}/network`, which changes it live. The policy model is src/api/vm-network.ts;
 * the engine records the policy with the claim and the VM enforces it in its namespace (src/vmm/net).
 *
 * Who may set what: the tenant layer only narrows what the template layer lets through, so whoever may claim or holds
 * the sandbox's token may set it; the template layer replaces the secure default (it can open private ranges), so only
 * the fleet's root token gives one (sandbox-apiserver and the operator's paths), or this node's claim gateway. The
 * ingress layer (who may connect to the VM's pod address: the CRD layout's Ingress NetworkPolicies, which the virtual
 * kubelet applies) is the platform's too: the same rule.
 */
import { Value } from '@sinclair/typebox/value';
import { networkPolicyProblems, VmNetworkPolicySchema, type VmNetworkPolicy } from '../api/vm-network.js';
import { SandboxError } from '../errors.js';
import { isOperator, type Principal } from './auth.js';
import type { PoolKey } from './pool-key.js';

const bad = (message: string) => new SandboxError('sandboxd.bad-request', message);

/** `v` as a VmNetworkPolicy, or a 400 naming the first problem under `field`. */
export function parseNetworkPolicy(v: unknown, field: string): VmNetworkPolicy {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw bad(`${field}: must be an object`);
  const first = Value.Errors(VmNetworkPolicySchema, v).First();
  if (first) {
    const path = first.path
      .split('/')
      .filter(Boolean)
      .map((seg) => (/^\d+$/.test(seg) ? `[${seg}]` : `.${seg}`))
      .join('');
    // A union of literals (action, otherwise, protocol) says which values it takes rather than "Expected union value".
    const choices = (first.schema as { anyOf?: Array<{ const?: unknown }> }).anyOf?.map((s) => s.const);
    const message =
      choices?.length && choices.every((c) => typeof c === 'string')
        ? `must be one of ${choices.join(', ')}`
        : first.message.toLowerCase();
    throw bad(`${field}${path}: ${message}`);
  }
  const policy = v as VmNetworkPolicy;
  const [problem] = networkPolicyProblems(policy);
  if (problem) throw bad(`${field}.${problem.field}: ${problem.message}`);
  return policy;
}

/** The layers only the platform sets, and what setting one does (for the 403). */
const PLATFORM_LAYERS = {
  template: 'replace the secure default',
  ingress: 'say who may connect to the sandbox',
} as const;

/**
 * 403 unless `who` may give the platform's layers that `given` has (`trusted`: this node's claim gateway made the
 * request).
 */
function assertMayGivePlatformLayers(who: Principal, field: string, given: object, trusted: boolean): void {
  if (trusted || isOperator(who)) return;
  for (const [layer, what] of Object.entries(PLATFORM_LAYERS))
    if (layer in given)
      throw new SandboxError(
        'sandboxd.forbidden',
        `${field}.${layer}: only the fleet's root token may ${what}; a tenant may narrow the egress policy (${field}.tenant)`,
      );
}

/**
 * 400 when a policy cannot be enforced on `key`'s lane: a NIC-less VM (net=none) has no traffic to filter, so a
 * tenant layer there is a mistake the caller should hear about (a template layer alone is the template's and is
 * moot there).
 */
export function assertPolicyFits(key: PoolKey, policy: VmNetworkPolicy | undefined, field = 'network'): void {
  if (policy?.tenant && key.net !== 'egress')
    throw bad(`${field}: network rules need net=egress (a net=${key.net} sandbox has no network to filter)`);
}

/**
 * A claim's `network`: undefined when absent or when nothing is left to enforce (the default policy needs no call,
 * which keeps the warm claim as fast as one without it). Template and ingress layers on a net=none claim are dropped.
 */
export function claimNetworkPolicy(
  raw: unknown,
  who: Principal,
  key: PoolKey,
  trusted = false,
): VmNetworkPolicy | undefined {
  if (raw === undefined || raw === null) return undefined;
  const policy = parseNetworkPolicy(raw, 'network');
  assertMayGivePlatformLayers(who, 'network', policy, trusted);
  assertPolicyFits(key, policy);
  return key.net === 'egress' ? nonEmpty(policy) : undefined;
}

/**
 * The policy after `change` (a `PUT .../network` body, a checkpoint claim's `network`): each layer absent =
 * unchanged, `null` = back to the default (no layer), an object = replaced. So a tenant that replaces its own layer
 * never drops the platform's template layer. 400/403 naming `field` for a change that is not one.
 */
export function updatedPolicy(
  current: VmNetworkPolicy | undefined,
  change: unknown,
  who: Principal,
  field = 'body',
): VmNetworkPolicy | undefined {
  if (typeof change !== 'object' || change === null || Array.isArray(change)) throw bad(`${field}: must be an object`);
  const body = change as Record<string, unknown>;
  const given: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(body)) if (v !== null) given[k] = v;
  const parsed = parseNetworkPolicy(given, field);
  assertMayGivePlatformLayers(who, field, body, false);
  const next: VmNetworkPolicy = { ...current };
  for (const layer of ['template', 'tenant', 'ingress'] as const) {
    if (!(layer in body)) continue;
    const v = parsed[layer];
    if (v) next[layer] = v;
    else delete next[layer];
  }
  return nonEmpty(next);
}

/** `policy`, or undefined when it has no layer (the defaults need no call). */
function nonEmpty(policy: VmNetworkPolicy): VmNetworkPolicy | undefined {
  return policy.template || policy.tenant || policy.ingress ? policy : undefined;
}
