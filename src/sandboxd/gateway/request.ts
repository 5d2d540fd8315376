/**
 * A gateway claim by a Kubernetes identity (docs/claim-gateway.md "Request"): `POST /v1/claim` on the claim
 * listener with `{namespace, name, warm_pool, ttl_seconds?}`. It becomes a node-local claim that carries a Sandbox
 * object named after the claim, so the aggregated API serves it as `<namespace>/<name>` like any create (its
 * annotations show which gateway, pool and user it was for), and a node-side fact saying the same (deliveryFact),
 * which the record and orphan adoption read back, also after a restart, from the node's own claim table.
 */
import { randomUUID } from 'node:crypto';
import { AnnotationKeys, CocoonAnnotationKeys, fnv1a32, LabelKeys, kubeTime } from '../../api/index.js';
import { SandboxError } from '../../errors.js';
import { optionalInt } from '../http-api.js';
import type { GatewayDeliveryFact, SandboxRecord } from '../claims.js';
import type { ResolvedPool } from './pools.js';

export const DELIVERED_BY = 'claim-gateway';

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const FIELDS = new Set(['namespace', 'name', 'warm_pool', 'ttl_seconds']);

export interface KubeClaimRequest {
  namespace: string;
  name: string;
  warmPool: string;
  ttlSeconds: number | undefined;
}

function required(body: Record<string, unknown>, field: string): string {
  const v = body[field];
  if (typeof v !== 'string' || v === '')
    throw new SandboxError('sandboxd.bad-request', `${field}: required (a string)`);
  return v;
}

/** The request's fields; 400 naming the field for anything else. */
export function parseKubeClaim(body: Record<string, unknown>): KubeClaimRequest {
  for (const k of Object.keys(body))
    if (!FIELDS.has(k))
      throw new SandboxError(
        'sandboxd.bad-request',
        `unknown field "${k}": a claim by a Kubernetes identity is {namespace, name, warm_pool, ttl_seconds?}`,
      );
  const namespace = required(body, 'namespace');
  if (!DNS_LABEL.test(namespace))
    throw new SandboxError('sandboxd.bad-request', `namespace: "${namespace}" is not a namespace name`);
  const name = required(body, 'name');
  if (name.length > 253 || !DNS_SUBDOMAIN.test(name))
    throw new SandboxError(
      'sandboxd.bad-request',
      `name: "${name}" is not a lowercase RFC 1123 subdomain (the claim's and the Sandbox's name)`,
    );
  const warmPool = required(body, 'warm_pool');
  if (warmPool.length > 253 || !DNS_SUBDOMAIN.test(warmPool))
    throw new SandboxError('sandboxd.bad-request', `warm_pool: "${warmPool}" is not a SandboxWarmPool name`);
  return { namespace, name, warmPool, ttlSeconds: optionalInt(body.ttl_seconds, 'ttl_seconds', 0) };
}

/** The Sandbox the claim is (what the node stores with it and the aggregated API serves). */
export function sandboxObject(req: KubeClaimRequest, pool: ResolvedPool, user: string) {
  return {
    metadata: {
      name: req.name,
      namespace: req.namespace,
      uid: randomUUID(),
      creationTimestamp: kubeTime(),
      labels: { [LabelKeys.sandboxNameHash]: fnv1a32(req.name) },
      annotations: {
        [CocoonAnnotationKeys.deliveredBy]: DELIVERED_BY,
        [CocoonAnnotationKeys.warmPool]: req.warmPool,
        [AnnotationKeys.sandboxTemplateRef]: pool.template,
        [CocoonAnnotationKeys.claimedBy]: user,
      },
    },
    spec: { podTemplate: pool.podTemplate },
  };
}

/** What the record needs to know about one delivery; rebuilt from the claim table after a restart. */
export interface Delivery {
  id: string;
  namespace: string;
  name: string;
  warmPool: string;
  template: string;
  user: string;
  /** When the gateway got the claim (ms epoch; the claim's `controller-first-observed-at`). */
  claimedAtMs: number;
}

/** The node-side fact the gateway records with its claim (claims.ts SandboxRecord.gatewayDelivery). */
export function deliveryFact(req: KubeClaimRequest, pool: ResolvedPool, user: string): GatewayDeliveryFact {
  return { namespace: req.namespace, name: req.name, warmPool: req.warmPool, template: pool.template, user };
}

interface StoredAnnotations {
  metadata?: { namespace?: unknown; name?: unknown; annotations?: Record<string, unknown> };
}

/**
 * A record this node's gateway made before the delivery was a node-side fact (an older sandboxd's claim table):
 * only the gateway's own claims were made for a `kubernetes:` tenant (a name the gateway gives; no tenant token's,
 * unless the operator's tenants file names one so), from a pool (never a fork, which inherits its parent's tenant),
 * with the object's name as the claim_ref.
 */
function legacyDelivery(rec: SandboxRecord): GatewayDeliveryFact | undefined {
  if (!rec.tenant?.startsWith('kubernetes:') || (rec.source !== 'warm' && rec.source !== 'provisioned')) return;
  const meta = (rec.object as StoredAnnotations | undefined)?.metadata;
  const a = meta?.annotations;
  if (a?.[CocoonAnnotationKeys.deliveredBy] !== DELIVERED_BY) return;
  if (typeof meta?.namespace !== 'string' || typeof meta.name !== 'string') return;
  if (rec.claimRef !== `${meta.namespace}/${meta.name}`) return;
  return {
    namespace: meta.namespace,
    name: meta.name,
    warmPool: String(a[CocoonAnnotationKeys.warmPool] ?? ''),
    template: String(a[AnnotationKeys.sandboxTemplateRef] ?? ''),
    user: rec.tenant.slice('kubernetes:'.length),
  };
}

/**
 * The delivery a claim-table record is, if this node's gateway made it: the node's own fact, never the object's
 * annotations (whoever gives an object writes those; trusting them let a caller have sandboxd, with its
 * cluster-wide rights, create or bind SandboxClaims in any namespace).
 */
export function deliveryOf(rec: SandboxRecord): Delivery | undefined {
  const f = rec.gatewayDelivery ?? legacyDelivery(rec);
  if (!f) return undefined;
  return { id: rec.id, ...f, claimedAtMs: Date.parse(rec.claimedAt) };
}
