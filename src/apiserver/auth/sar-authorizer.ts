/**
 * Delegated authorization (k8s.io/apiserver authorizerfactory/delegating.go and plugin/pkg/authorizer/webhook):
 * members of `system:masters` and the health paths are allowed here; everything else is a SubjectAccessReview v1
 * about the request's user and RequestInfo. Decisions are cached (10 s for allow, 10 s for deny, keyed by the
 * review's spec, bounded; src/kube/reviews.ts, shared with sandboxd's claim gateway), so a client's burst costs one
 * review. A review that fails throws (answer 500, as upstream), and is not cached.
 */
import type { KubeClient } from '../../kube/client.js';
import {
  AccessReviewer,
  reviewSubject,
  type AccessReviewerOptions,
  type SubjectAccessReviewSpec,
} from '../../kube/reviews.js';
import type { AuthorizationDecision, Authorizer, RequestInfo, UserInfo } from '../types.js';
import { HEALTH_PATHS, isPathOrSubpath } from './paths.js';

export type { SubjectAccessReviewSpec } from '../../kube/reviews.js';

/** The cache options (allow and deny TTLs, default 10 s each; at most 8192 decisions) are AccessReviewer's. */
export interface SubjectAccessReviewAuthorizerOptions extends AccessReviewerOptions {
  /** Non-resource paths (and sub-paths) allowed to anyone (default /healthz, /readyz, /livez). */
  alwaysAllowPaths?: readonly string[];
  /** Groups whose members may do anything (default system:masters; the aggregator's availability probe is one). */
  alwaysAllowGroups?: readonly string[];
}

/** The review's spec, as the webhook authorizer builds it from the user and the request's attributes. */
export function subjectAccessReviewSpec(user: UserInfo, info: RequestInfo): SubjectAccessReviewSpec {
  const spec: SubjectAccessReviewSpec = reviewSubject(user);
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
  private readonly reviewer: AccessReviewer;
  private readonly alwaysAllowPaths: readonly string[];
  private readonly alwaysAllowGroups: readonly string[];

  constructor(client: KubeClient, opts: SubjectAccessReviewAuthorizerOptions = {}) {
    this.reviewer = new AccessReviewer(client, opts);
    this.alwaysAllowPaths = opts.alwaysAllowPaths ?? HEALTH_PATHS;
    this.alwaysAllowGroups = opts.alwaysAllowGroups ?? ['system:masters'];
  }

  async authorize(user: UserInfo, info: RequestInfo): Promise<AuthorizationDecision> {
    const group = user.groups.find((g) => this.alwaysAllowGroups.includes(g));
    if (group !== undefined) return { allowed: true, reason: `member of ${group}` };
    if (!info.isResourceRequest && isPathOrSubpath(info.path, this.alwaysAllowPaths))
      return { allowed: true, reason: `${info.path} is always allowed` };
    return this.reviewer.review(subjectAccessReviewSpec(user, info));
  }
}
