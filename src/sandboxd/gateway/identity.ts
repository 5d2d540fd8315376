/**
 * Who may claim through the gateway (docs/claim-gateway.md "Identity"): the caller's Kubernetes bearer token,
 * resolved by TokenReview, and a SubjectAccessReview for `create` on `extensions.agents.x-k8s.io/sandboxclaims`
 * in the claim's namespace — the check kube-apiserver itself makes for `kubectl create -f claim.yaml` (no name:
 * RBAC cannot restrict creates by name), so the gateway grants exactly what RBAC grants there.
 *
 * Both answers are cached (src/kube/reviews.ts), positive and negative, bounded; a hit past half its TTL is
 * re-asked in the background, so a warm claim never waits for kube-apiserver and revoked RBAC takes effect within
 * the TTL. While kube-apiserver does not answer, an expired verdict keeps being used for up to `staleMs` (claims go
 * on during an outage for identities seen before it); a token or namespace first seen then is refused with 503.
 */
import { errorMessage } from '../../errors.js';
import {
  AccessReviewer,
  reviewSubject,
  SandboxClaims,
  TokenReviewer,
  type AccessDecision,
  type KubeClient,
  type ReviewedUser,
  type SubjectAccessReviewSpec,
  type TokenVerdict,
} from '../../kube/index.js';
import { ReviewBudget, type ReviewBudgetOptions } from '../../kube/review-budget.js';

export interface IdentityOptions {
  client: KubeClient;
  /** How long a verdict is used before it must be asked again (ms). */
  cacheTtlMs: number;
  /** How long past that an expired verdict is still used while kube-apiserver does not answer (ms). */
  staleMs: number;
  /** Bound on one review (ms). */
  timeoutMs?: number;
  /** Bounds on the TokenReviews uncached tokens may cause (src/kube/review-budget.ts). */
  budget?: ReviewBudgetOptions;
}

export type Refusal = { status: 401 | 403 | 429 | 503; message: string; retryAfter?: number };
export type IdentityResult = { user: ReviewedUser } | Refusal;

interface Subject {
  key: string;
  spec: Omit<SubjectAccessReviewSpec, 'resourceAttributes'>;
}

/** An authenticated caller: its user and, computed once per token verdict, its SubjectAccessReview subject. */
export interface Caller {
  user: ReviewedUser;
  subject: Subject;
}

export class KubeIdentity {
  private readonly tokens: TokenReviewer;
  private readonly access: AccessReviewer;
  private readonly callers = new WeakMap<TokenVerdict, Caller>();
  private readonly budget: ReviewBudget;

  constructor(opts: IdentityOptions) {
    const cache = {
      refreshAhead: 0.5,
      staleMs: opts.staleMs,
      timeoutMs: opts.timeoutMs ?? 5000,
    };
    this.tokens = new TokenReviewer(opts.client, { ...cache, cacheTtlMs: opts.cacheTtlMs });
    this.budget = new ReviewBudget(opts.budget);
    this.access = new AccessReviewer(opts.client, {
      ...cache,
      allowCacheTtlMs: opts.cacheTtlMs,
      denyCacheTtlMs: opts.cacheTtlMs,
    });
  }

  /**
   * Who holds `token` (TokenReview): at once when the verdict is cached; an uncached token is reviewed only within
   * the budget of `source` (the caller's address) and of the listener, else refused with 429.
   */
  authenticate(token: string, source?: string): Caller | Refusal | Promise<Caller | Refusal> {
    const key = this.tokens.keyOf(token);
    const cached = this.tokens.cached(token, key);
    if (cached) return this.callerOf(cached);
    const admission = this.budget.admit(source);
    if (!admission.ok)
      return {
        status: 429,
        message: `the bearer token was not reviewed: ${admission.reason}`,
        retryAfter: admission.retryAfterSeconds,
      };
    return this.tokens.review(token, key).then(
      (v) => {
        admission.done('user' in v);
        return this.callerOf(v);
      },
      (err: unknown) => {
        admission.done(false);
        return unavailable('the bearer token could not be reviewed', err);
      },
    );
  }

  /** Whether `caller` may create SandboxClaims in `namespace` (SubjectAccessReview): at once when cached. */
  authorize(caller: Caller, namespace: string): IdentityResult | Promise<IdentityResult> {
    const spec: SubjectAccessReviewSpec = {
      ...caller.subject.spec,
      resourceAttributes: {
        namespace,
        verb: 'create',
        group: SandboxClaims.group,
        version: SandboxClaims.version,
        resource: SandboxClaims.plural,
        subresource: '',
        name: '',
      },
    };
    const key = `${caller.subject.key}\n${namespace}`;
    const decided = (d: AccessDecision): IdentityResult =>
      d.allowed
        ? { user: caller.user }
        : {
            status: 403,
            message: `${caller.user.name} may not create sandboxclaims.${SandboxClaims.group} in namespace ${namespace}: ${d.reason}`,
          };
    const cached = this.access.cached(spec, key);
    if (cached) return decided(cached);
    return this.access
      .review(spec, key)
      .then(decided, (err: unknown) => unavailable('the SubjectAccessReview could not be made', err));
  }

  private callerOf(v: TokenVerdict): Caller | Refusal {
    if ('failure' in v) return { status: 401, message: v.failure };
    let c = this.callers.get(v);
    if (!c) {
      const spec = reviewSubject(v.user);
      c = { user: v.user, subject: { key: JSON.stringify(spec), spec } };
      this.callers.set(v, c);
    }
    return c;
  }
}

function unavailable(what: string, err: unknown): Refusal {
  return { status: 503, message: `${what} (kube-apiserver did not answer: ${errorMessage(err)}); retry shortly` };
}
