/**
 * e2b's network options as this server serves them (docs/e2b.md "Control plane", its Network paragraph): `allow_internet_access` and
 * `network.{allowOut, denyOut}` of a create and of `PUT /sandboxes/{id}/network` become the sandbox's tenant layer
 * (src/api/vm-network.ts e2bTenantLayer: allowOut wins over denyOut, `allow_internet_access: false` denies
 * everything), which the sandbox's node enforces in its VM's namespace; `network.allowPublicTraffic` is the inbound
 * token rule (views.ts). What the sandbox has is read back from its node's row (`network`), never from the request.
 */
import {
  cidrProblem,
  e2bTenantLayer,
  MAX_EGRESS_CIDRS,
  type E2bNetworkOptions,
  type EgressLayer,
} from '../../api/vm-network.js';
import { E2B_PUBLIC_TRAFFIC_ANNOTATION } from '../../api/keys.js';
import type { PoolNet } from '../../api/pool-key.js';
import type { SandboxEntry } from '../sandboxes/entry.js';
import { badRequest, optionalBool } from './http.js';

/** `allowOut` / `denyOut`: addresses or CIDRs (a domain name needs an egress proxy, which this server does not run). */
function cidrList(v: unknown, field: string): string[] | undefined {
  if (v === undefined || v === null) return undefined;
  if (!Array.isArray(v)) throw badRequest(`${field}: must be an array of IP addresses or CIDRs`);
  // One slot is left for allow_internet_access: false, which adds 0.0.0.0/0 to the deny list.
  if (v.length >= MAX_EGRESS_CIDRS) throw badRequest(`${field}: at most ${MAX_EGRESS_CIDRS - 1} entries`);
  v.forEach((c: unknown, i) => {
    const problem = cidrProblem(c);
    if (problem) throw badRequest(`${field}[${i}]: ${problem}`);
  });
  return v as string[];
}

/** e2b fields this server does not serve: a 400 naming the field unless it is absent or empty. */
function assertUnserved(o: Record<string, unknown>, fields: readonly string[], where: string): void {
  for (const f of fields) {
    const v = o[f];
    if (v === undefined || v === null) continue;
    if (typeof v === 'object' && Object.keys(v).length === 0) continue;
    throw badRequest(
      `${where}${f}: not supported by this server${f === 'rules' || f === 'egressProxy' ? ' (no egress proxy runs here; give addresses or CIDRs in allowOut/denyOut)' : ''}`,
    );
  }
}

/** The egress half of a create's `network` or of an update's body. */
function egressOptions(o: Record<string, unknown>, where: string, internet: boolean | undefined): E2bNetworkOptions {
  const allowOut = cidrList(o.allowOut, `${where}allowOut`);
  const denyOut = cidrList(o.denyOut, `${where}denyOut`);
  return {
    ...(allowOut ? { allowOut } : {}),
    ...(denyOut ? { denyOut } : {}),
    ...(internet !== undefined ? { allowInternetAccess: internet } : {}),
  };
}

/**
 * A create's `network` (with its `allow_internet_access`): allowPublicTraffic (e2b's default, true: the sandbox's
 * ports other than envd's answer without a token) and the egress options.
 */
export function createNetworkOptions(
  network: unknown,
  internet: boolean | undefined,
): { publicTraffic: boolean; egress: E2bNetworkOptions } {
  if (network === undefined || network === null)
    return { publicTraffic: true, egress: egressOptions({}, '', internet) };
  if (typeof network !== 'object' || Array.isArray(network)) throw badRequest('network: must be an object');
  const o = network as Record<string, unknown>;
  const known = ['allowPublicTraffic', 'allowOut', 'denyOut', 'rules', 'egressProxy'];
  assertUnserved(
    o,
    Object.keys(o).filter((k) => !known.includes(k)),
    'network.',
  );
  assertUnserved(o, ['rules', 'egressProxy'], 'network.');
  const allow = optionalBool(o.allowPublicTraffic, 'network.allowPublicTraffic');
  return { publicTraffic: allow !== false, egress: egressOptions(o, 'network.', internet) };
}

/** `PUT /sandboxes/{id}/network`'s body: `{allowOut?, denyOut?, allow_internet_access?}` (rules, egressProxy: 400). */
export function updateNetworkOptions(body: Record<string, unknown>): E2bNetworkOptions {
  const known = ['allowOut', 'denyOut', 'allow_internet_access', 'rules', 'egressProxy'];
  assertUnserved(
    body,
    Object.keys(body).filter((k) => !known.includes(k)),
    '',
  );
  assertUnserved(body, ['rules', 'egressProxy'], '');
  return egressOptions(body, '', optionalBool(body.allow_internet_access, 'allow_internet_access'));
}

/**
 * The tenant layer of a sandbox on lane `net`: none on a NIC-less VM (net=none has no internet to narrow, so the
 * options are accepted and moot: old SDKs send `allow_internet_access: true` on every create), else e2bTenantLayer
 * (undefined when the options narrow nothing, e.g. `allow_internet_access: true` alone).
 */
export function tenantLayerFor(net: PoolNet, o: E2bNetworkOptions): EgressLayer | undefined {
  return net === 'egress' ? e2bTenantLayer(o) : undefined;
}

/** SandboxDetail's `allowInternetAccess` and `network`, from the tenant layer the node reports. */
export function networkView(e: SandboxEntry) {
  const allowOut: string[] = [];
  const denyOut: string[] = [];
  for (const r of e.network?.tenant?.rules ?? []) (r.action === 'allow' ? allowOut : denyOut).push(...r.to);
  // allowOut wins over denyOut, so an allowed 0.0.0.0/0 (e2b's ALL_TRAFFIC) keeps the internet on.
  const internetDenied = denyOut.includes('0.0.0.0/0') && !allowOut.includes('0.0.0.0/0');
  return {
    allowInternetAccess: e.pool.net === 'egress' && !internetDenied,
    network: {
      allowOut,
      denyOut,
      allowPublicTraffic: e.object.metadata.annotations?.[E2B_PUBLIC_TRAFFIC_ANNOTATION] === 'true',
    },
  };
}
