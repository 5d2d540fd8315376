/**
 * Asking kube-apiserver who a bearer token belongs to (TokenReview v1) and whether a user may do something
 * (SubjectAccessReview v1), with bounded caches of the answers: the delegated authentication and authorization of
 * sandbox-apiserver (src/apiserver/auth) and the Kubernetes identity of sandboxd's claim gateway both use these.
 *
 * Token verdicts, valid and invalid alike, are cached under an HMAC of the token with a per-process random key,
 * so the cache holds no token and no unsalted hash of one, and a lookup compares only digests of a secret the
 * caller never sees (no timing side channel to learn a token from). A review that fails (transport, 5xx) is not
 * cached: it says nothing about the credential. Both caches take ExpiringCache's refresh-ahead and stale options.
 */
import { createHmac, randomBytes } from 'node:crypto';
import type { KubeClient } from './client.js';
import { ExpiringCache, type ExpiringCacheOptions } from './expiring-cache.js';
import { SubjectAccessReviews, TokenReviews, type KubeObject } from './resource.js';

/** A user as Kubernetes' user.Info: what a TokenReview says and what a SubjectAccessReview asks about. */
export interface ReviewedUser {
  name: string;
  uid?: string;
  groups: string[];
  extra: Record<string, string[]>;
}

export type TokenVerdict = { user: ReviewedUser } | { failure: string };

export interface ReviewCacheOptions extends ExpiringCacheOptions {
  /** Least recently used answers are dropped past this many. */
  maxCacheEntries?: number;
  /** Bound on one review request (ms); default: the client's. */
  timeoutMs?: number;
}

export interface TokenReviewerOptions extends ReviewCacheOptions {
  /** Audiences a token must be for; empty (the default): kube-apiserver's own. */
  audiences?: string[];
  /** How long an answer is reused, valid or invalid (default 10 s, as upstream's delegated authentication). */
  cacheTtlMs?: number;
}

interface TokenReview extends KubeObject {
  spec: { token: string; audiences?: string[] };
  status?: {
    authenticated?: boolean;
    user?: { username?: string; uid?: string; groups?: string[]; extra?: Record<string, string[]> };
    audiences?: string[];
    error?: string;
  };
}

const signalOf = (timeoutMs: number | undefined) =>
  timeoutMs === undefined ? undefined : AbortSignal.timeout(timeoutMs);

export class TokenReviewer {
  private readonly cache: ExpiringCache<TokenVerdict>;
  private readonly hmacKey = randomBytes(32);
  private readonly audiences: string[];
  private readonly ttlMs: number;
  private readonly ttlOf: () => number;

  constructor(
    private readonly client: KubeClient,
    private readonly opts: TokenReviewerOptions = {},
  ) {
    this.audiences = opts.audiences ?? [];
    this.ttlMs = opts.cacheTtlMs ?? 10_000;
    this.ttlOf = () => this.ttlMs;
    this.cache = new ExpiringCache(opts.maxCacheEntries ?? 4096, opts);
  }

  /** The cache key of a token (an HMAC under this process's key). */
  keyOf(token: string): string {
    return createHmac('sha256', this.hmacKey).update(token).digest('base64');
  }

  /** The verdict without waiting (ExpiringCache.peek), or undefined: then call review(). */
  cached(token: string, key = this.keyOf(token)): TokenVerdict | undefined {
    return this.cache.peek(key, () => this.fetch(token), this.ttlOf);
  }

  /** The verdict, cached or from a TokenReview; rejects when the review itself failed. */
  review(token: string, key = this.keyOf(token)): Promise<TokenVerdict> {
    return this.cache.getOrLoad(key, () => this.fetch(token), this.ttlOf);
  }

  private async fetch(token: string): Promise<TokenVerdict> {
    const review = await this.client.create<TokenReview>(
      TokenReviews,
      {
        apiVersion: 'authentication.k8s.io/v1',
        kind: 'TokenReview',
        metadata: {},
        spec: { token, ...(this.audiences.length ? { audiences: this.audiences } : {}) },
      },
      { signal: signalOf(this.opts.timeoutMs) },
    );
    const status = review.status ?? {};
    const username = status.user?.username;
    if (!status.authenticated || !username)
      return { failure: `invalid bearer token${status.error ? `: ${status.error}` : ''}` };
    if (this.audiences.length && !(status.audiences ?? []).some((a) => this.audiences.includes(a)))
      return {
        failure: `the token's audiences ${JSON.stringify(status.audiences ?? [])} include none of ${JSON.stringify(this.audiences)}`,
      };
    return {
      user: {
        name: username,
        ...(status.user?.uid ? { uid: status.user.uid } : {}),
        groups: status.user?.groups ?? [],
        extra: status.user?.extra ?? {},
      },
    };
  }
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

export interface AccessDecision {
  allowed: boolean;
  /** Why (from the SubjectAccessReview, or the local rule that decided). */
  reason: string;
}

export interface AccessReviewerOptions extends ReviewCacheOptions {
  /** How long an allow is reused (default 10 s). */
  allowCacheTtlMs?: number;
  /** How long a deny is reused (default 10 s). */
  denyCacheTtlMs?: number;
}

interface SubjectAccessReview extends KubeObject {
  spec: SubjectAccessReviewSpec;
  status?: { allowed?: boolean; denied?: boolean; reason?: string; evaluationError?: string };
}

/** The SubjectAccessReview spec's user part. */
export function reviewSubject(user: ReviewedUser): Pick<SubjectAccessReviewSpec, 'user' | 'uid' | 'groups' | 'extra'> {
  return {
    user: user.name,
    ...(user.uid ? { uid: user.uid } : {}),
    groups: user.groups,
    ...(Object.keys(user.extra).length ? { extra: user.extra } : {}),
  };
}

export class AccessReviewer {
  private readonly cache: ExpiringCache<AccessDecision>;
  private readonly ttlOf: (d: AccessDecision) => number;

  constructor(
    private readonly client: KubeClient,
    private readonly opts: AccessReviewerOptions = {},
  ) {
    const allow = opts.allowCacheTtlMs ?? 10_000;
    const deny = opts.denyCacheTtlMs ?? 10_000;
    this.ttlOf = (d) => (d.allowed ? allow : deny);
    this.cache = new ExpiringCache(opts.maxCacheEntries ?? 8192, opts);
  }

  /** The decision without waiting, or undefined: then call review(). `key` identifies the spec (default: its JSON). */
  cached(spec: SubjectAccessReviewSpec, key = JSON.stringify(spec)): AccessDecision | undefined {
    return this.cache.peek(key, () => this.fetch(spec), this.ttlOf);
  }

  /** The decision, cached or from a SubjectAccessReview; rejects when the review itself failed. */
  review(spec: SubjectAccessReviewSpec, key = JSON.stringify(spec)): Promise<AccessDecision> {
    return this.cache.getOrLoad(key, () => this.fetch(spec), this.ttlOf);
  }

  private async fetch(spec: SubjectAccessReviewSpec): Promise<AccessDecision> {
    const review = await this.client.create<SubjectAccessReview>(
      SubjectAccessReviews,
      { apiVersion: 'authorization.k8s.io/v1', kind: 'SubjectAccessReview', metadata: {}, spec },
      { signal: signalOf(this.opts.timeoutMs) },
    );
    const status = review.status ?? {};
    if (status.allowed) return { allowed: true, reason: status.reason ?? '' };
    // upstream's NoOpinion and Deny both end in 403 here: nothing after this authorizer could allow
    const reason = status.reason || status.evaluationError || 'no RBAC rule or other authorizer allows it';
    return { allowed: false, reason };
  }
}
