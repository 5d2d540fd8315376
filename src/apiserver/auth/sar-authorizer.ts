/**
 * Delegated authorization (k8s.io/apiserver authorizerfactory/delegating.go and plugin/pkg/authorizer/webhook):
 * members of `system:masters` and the health paths are allowed here; everything else is a SubjectAccessReview v1
 * about the request's user and RequestInfo. Decisions are cached (10 s for allow, 10 s for deny, keyed by the
 * review's spec, bounded), so a client's burst costs one review. A review that fails throws (answer 500, as
 * upstream), and is not cached.
 */
import type { KubeClient } from '../../kube/client.js';
import { SubjectAccessReviews, type KubeObject } from '../../kube/resource.js';
import type { AuthorizationDecision, Authorizer, RequestInfo, UserInfo } from '../types.js';
import { ExpiringCache } from './expiring-cache.js';
import { HEALTH_PATHS, isPathOrSubpath } from './paths.js';

export interface SubjectAccessReviewAuthorizerOptions {
  /** How long an allow is reused (default 10 s). */
  allowCacheTtlMs?: number;
  /** How long a deny is reused (default 10 s). */
  denyCacheTtlMs?: number;
  /** Least recently used decisions are dropped past this many (default 8192). */
  maxCacheEntries?: number;
  /** Non-resource paths (and sub-paths) allowed to anyone (default /healthz, /readyz, /livez). */
  alwaysAllowPaths?: readonly string[];
  /** Groups whose members may do anything (default system:masters; the aggregator's availability probe is one). */
  alwaysAllowGroups?: readonly string[];
}

export interface SubjectAccessReviewSpec {
  user: string;
  uid?: string;
  groups: string[];
  extra?: Record<string, string[]>;
  resourceAttributes?: {
    namespace: string;
    verb: string;
    group: string;
    version: string;
    resource: string;
    subresource: string;
    name: string;
  };
  nonResourceAttributes?: { path: string; verb: string };
}

interface SubjectAccessReview extends KubeObject {
  spec: SubjectAccessReviewSpec;
  status?: { allowed?: boolean; denied?: boolean; reason?: string; evaluationError?: string };
}

/** The review's spec, as the webhook authorizer builds it from the user and the request's attributes. */
export function subjectAccessReviewSpec(user: UserInfo, info: RequestInfo): SubjectAccessReviewSpec {
  const spec: SubjectAccessReviewSpec = {
    user: user.name,
    ...(user.uid ? { uid: user.uid } : {}),
    groups: user.groups,
    ...(Object.keys(user.extra).length ? { extra: user.extra } : {}),
  };
  if (info.isResourceRequest)
    spec.resourceAttributes = {
      namespace: info.namespace,
      verb: info.verb,
      group: info.apiGroup,
      version: info.apiVersion,
      resource: info.resource,
      subresource: info.subresource,
      name: info.name,
    };
  else spec.nonResourceAttributes = { path: info.path, verb: info.verb };
  return spec;
}

export class SubjectAccessReviewAuthorizer implements Authorizer {
  private readonly cache: ExpiringCache<AuthorizationDecision>;
  private readonly allowTtlMs: number;
  private readonly denyTtlMs: number;
  private readonly alwaysAllowPaths: readonly string[];
  private readonly alwaysAllowGroups: readonly string[];

  constructor(
    private readonly client: KubeClient,
    opts: SubjectAccessReviewAuthorizerOptions = {},
  ) {
    this.cache = new ExpiringCache(opts.maxCacheEntries ?? 8192);
    this.allowTtlMs = opts.allowCacheTtlMs ?? 10_000;
    this.denyTtlMs = opts.denyCacheTtlMs ?? 10_000;
    this.alwaysAllowPaths = opts.alwaysAllowPaths ?? HEALTH_PATHS;
    this.alwaysAllowGroups = opts.alwaysAllowGroups ?? ['system:masters'];
  }

  async authorize(user: UserInfo, info: RequestInfo): Promise<AuthorizationDecision> {
    const group = user.groups.find((g) => this.alwaysAllowGroups.includes(g));
    if (group !== undefined) return { allowed: true, reason: `member of ${group}` };
    if (!info.isResourceRequest && isPathOrSubpath(info.path, this.alwaysAllowPaths))
      return { allowed: true, reason: `${info.path} is always allowed` };
    const spec = subjectAccessReviewSpec(user, info);
    return this.cache.getOrLoad(
      JSON.stringify(spec),
      () => this.review(spec),
      (d) => (d.allowed ? this.allowTtlMs : this.denyTtlMs),
    );
  }

  private async review(spec: SubjectAccessReviewSpec): Promise<AuthorizationDecision> {
    const review = await this.client.create<SubjectAccessReview>(SubjectAccessReviews, {
      apiVersion: 'authorization.k8s.io/v1',
      kind: 'SubjectAccessReview',
      metadata: {},
      spec,
    });
    const status = review.status ?? {};
    if (status.allowed) return { allowed: true, reason: status.reason ?? '' };
    // upstream's NoOpinion and Deny both end in 403 here: nothing after this authorizer could allow
    const reason = status.reason || status.evaluationError || 'no RBAC rule or other authorizer allows it';
    return { allowed: false, reason };
  }
}
