/**
 * The egress policy of a networked microVM (docs/vm.md "Networking"), as the APIs users already write it turn into
 * it and as sandbox-apiserver sends it to sandboxd. A policy is a stack of layers evaluated in order; a packet must
 * pass every layer. Inside a layer the first rule that matches decides: `allow` passes the packet to the next layer,
 * `deny` drops it; a packet no rule matched gets the layer's `otherwise`.
 *
 *   template layer   the SandboxTemplate's NetworkPolicy egress rules (CRD layout), else the secure default:
 *                    public addresses allowed, every internal range denied
 *   tenant layer     e2b `network` / `allow_internet_access` (create and `PUT /sandboxes/{id}/network`): it can
 *                    only narrow what the template layer lets through, so a tenant never reaches a private range
 *                    the platform engineer did not open
 *
 * IPv4 only: the guest has no IPv6 address, and IPv6 is dropped in the VM's namespace whatever a rule says.
 *
 * The schema lives here (the APIs validate with it); src/vmm/net/policy.ts has the same shapes as plain types and
 * the secure default, for the VMM that enforces them (it imports nothing of src/api).
 */
import { Type, type Static } from '@sinclair/typebox';
import { isIP } from 'node:net';
import type {
  NetworkPolicyEgressRule,
  NetworkPolicyIngressRule,
  NetworkPolicyPeer,
  NetworkPolicyPort,
} from './generated/core-v1.36.gen.js';

export const MAX_EGRESS_RULES = 256;
export const MAX_EGRESS_CIDRS = 1024;

const Cidr = Type.String({ minLength: 1, maxLength: 43, description: 'An IPv4/IPv6 address or CIDR' });

export const EgressPortSchema = Type.Object(
  {
    protocol: Type.Union([Type.Literal('tcp'), Type.Literal('udp'), Type.Literal('sctp')]),
    port: Type.Optional(Type.Integer({ minimum: 1, maximum: 65535 })),
    endPort: Type.Optional(Type.Integer({ minimum: 1, maximum: 65535 })),
  },
  { additionalProperties: false },
);

export const EgressRuleSchema = Type.Object(
  {
    action: Type.Union([Type.Literal('allow'), Type.Literal('deny')]),
    /** Destinations; empty = any address. */
    to: Type.Array(Cidr, { maxItems: MAX_EGRESS_CIDRS }),
    /** Destinations carved out of `to` (NetworkPolicy ipBlock.except). */
    except: Type.Optional(Type.Array(Cidr, { maxItems: MAX_EGRESS_CIDRS })),
    /** Empty or absent = every port and protocol. */
    ports: Type.Optional(Type.Array(EgressPortSchema, { maxItems: 64 })),
  },
  { additionalProperties: false },
);

export const EgressLayerSchema = Type.Object(
  {
    /** Where the layer came from, for status and logs (e.g. `NetworkPolicy ns/name`, `e2b`). */
    source: Type.String({ maxLength: 300 }),
    rules: Type.Array(EgressRuleSchema, { maxItems: MAX_EGRESS_RULES }),
    otherwise: Type.Union([Type.Literal('allow'), Type.Literal('deny')]),
  },
  { additionalProperties: false },
);

/** What a claim or `PUT /v1/sandboxes/{id}/network` carries to sandboxd. Absent layers mean the defaults. */
export const VmNetworkPolicySchema = Type.Object(
  {
    /** Replaces the secure default (only the platform's own paths set it: the CRD layout's NetworkPolicies). */
    template: Type.Optional(EgressLayerSchema),
    /** The tenant's narrowing (e2b). */
    tenant: Type.Optional(EgressLayerSchema),
    /**
     * Who may connect to the VM's pod address (the CRD layout's Ingress NetworkPolicies; rules' `to` are the peers,
     * the sources). Absent = every peer that is routed there.
     */
    ingress: Type.Optional(EgressLayerSchema),
  },
  { additionalProperties: false },
);

export type EgressPort = Static<typeof EgressPortSchema>;
export type EgressRule = Static<typeof EgressRuleSchema>;
export type EgressLayer = Static<typeof EgressLayerSchema>;
export type VmNetworkPolicy = Static<typeof VmNetworkPolicySchema>;

/** What is wrong with `s` as a CIDR or address, or undefined when it is fine. */
export function cidrProblem(s: unknown): string | undefined {
  if (typeof s !== 'string') return 'must be a string';
  const [addr, bits, extra] = s.split('/');
  if (extra !== undefined) return `"${s}" is not a CIDR`;
  const family = isIP(addr ?? '');
  if (family === 0)
    return `"${s}" is not an IP address or CIDR (domain names need an egress proxy, which this server does not run)`;
  if (bits === undefined) return undefined;
  const max = family === 4 ? 32 : 128;
  if (!/^\d{1,3}$/.test(bits) || Number(bits) > max) return `"${s}" has an invalid prefix length (0-${max})`;
  return undefined;
}

/** Field errors of a policy the schema accepted (CIDR syntax, port ranges). */
export function networkPolicyProblems(policy: VmNetworkPolicy): { field: string; message: string }[] {
  const out: { field: string; message: string }[] = [];
  for (const name of ['template', 'tenant', 'ingress'] as const) {
    policy[name]?.rules.forEach((r, i) => {
      for (const list of ['to', 'except'] as const)
        (r[list] ?? []).forEach((c, j) => {
          const p = cidrProblem(c);
          if (p) out.push({ field: `${name}.rules[${i}].${list}[${j}]`, message: p });
        });
      (r.ports ?? []).forEach((p, j) => {
        if (p.endPort !== undefined && (p.port === undefined || p.endPort < p.port))
          out.push({ field: `${name}.rules[${i}].ports[${j}].endPort`, message: 'must be at least port' });
      });
    });
  }
  return out;
}

/** e2b's `network` object and `allow_internet_access` (docs/e2b.md, "Control plane"). */
export interface E2bNetworkOptions {
  allowOut?: readonly string[];
  denyOut?: readonly string[];
  allowInternetAccess?: boolean;
}

/**
 * e2b's rules as a tenant layer: allowOut wins over denyOut ("allow rules always take precedence"),
 * `allow_internet_access: false` is a denyOut of everything. Undefined when the options narrow nothing.
 */
export function e2bTenantLayer(o: E2bNetworkOptions): EgressLayer | undefined {
  const allow = [...(o.allowOut ?? [])];
  const deny = [...(o.denyOut ?? [])];
  if (o.allowInternetAccess === false) deny.push('0.0.0.0/0');
  if (!deny.length) return undefined; // allowOut alone narrows nothing: everything is allowed already
  const rules: EgressRule[] = [];
  if (allow.length) rules.push({ action: 'allow', to: allow });
  rules.push({ action: 'deny', to: deny });
  return { source: 'e2b network', rules, otherwise: 'allow' };
}

/**
 * NetworkPolicy egress rules (Kubernetes semantics: a packet is allowed when some rule matches it) as a template
 * layer. Peers a VM cannot evaluate (pod and namespace selectors: the VM's namespace has no view of the cluster's
 * pods) match nothing, which only ever denies more. Named ports match nothing either (the VM has no container ports).
 */
export function networkPolicyEgressLayer(source: string, rules: readonly NetworkPolicyEgressRule[]): EgressLayer {
  return peerRulesLayer(
    source,
    rules.map((r) => ({ peers: r.to, ports: r.ports })),
  );
}

/**
 * NetworkPolicy ingress rules as the ingress layer (VmNetworkPolicy.ingress): the same conversion with the rules'
 * `from` peers (the sources) as the layer's `to`, and `ports` the guest's. So a rule whose peers are all pod or
 * namespace selectors (the template's secure default lets in only the router pods) admits nobody at the pod address;
 * the router and port-forward reach the guest through its agent, not through this address.
 */
export function networkPolicyIngressLayer(source: string, rules: readonly NetworkPolicyIngressRule[]): EgressLayer {
  return peerRulesLayer(
    source,
    rules.map((r) => ({ peers: r.from, ports: r.ports })),
  );
}

/** One layer of allow rules from NetworkPolicy rules' peers and ports; what none matches is denied. */
function peerRulesLayer(
  source: string,
  rules: readonly { peers: NetworkPolicyPeer[] | undefined; ports: NetworkPolicyPort[] | undefined }[],
): EgressLayer {
  const out: EgressRule[] = [];
  for (const rule of rules) {
    const ports: EgressPort[] = [];
    for (const p of rule.ports ?? []) {
      const protocol = (p.protocol ?? 'TCP').toLowerCase();
      if (protocol !== 'tcp' && protocol !== 'udp' && protocol !== 'sctp') continue;
      if (typeof p.port === 'string' && !/^\d+$/.test(p.port)) continue;
      const port = p.port === undefined ? undefined : Number(p.port);
      ports.push({
        protocol,
        ...(port !== undefined ? { port } : {}),
        ...(p.endPort !== undefined && port !== undefined ? { endPort: p.endPort } : {}),
      });
    }
    // Every port of the rule was named or of an unknown protocol: the rule matches nothing.
    if (rule.ports?.length && !ports.length) continue;
    const portField = ports.length ? { ports } : {};
    if (!rule.peers?.length) {
      out.push({ action: 'allow', to: [], ...portField });
      continue;
    }
    for (const peer of rule.peers) {
      if (!peer.ipBlock) continue;
      const { cidr, except } = peer.ipBlock;
      out.push({ action: 'allow', to: [cidr], ...(except?.length ? { except: [...except] } : {}), ...portField });
    }
  }
  return { source, rules: out, otherwise: 'deny' };
}
