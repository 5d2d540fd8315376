/**
 * Bearer token authentication by TokenReview v1 (k8s.io/apiserver's delegated webhook token authenticator):
 * kube-apiserver says who a token belongs to. Answers are cached for 10 s, valid and invalid alike, keyed by an
 * HMAC of the token under a per-process random key, so the cache holds no token and no unsalted hash of one, and
 * looking a token up compares only digests of a secret key the caller never sees (no timing side channel to
 * learn a token from). A review that fails (transport, 5xx) is not cached: it says nothing about the token.
 */
import { createHmac, randomBytes } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { errorMessage } from '../../errors.js';
import type { KubeClient } from '../../kube/client.js';
import { TokenReviews, type KubeObject } from '../../kube/resource.js';
import { silentLogger, type Logger } from '../../log/logger.js';
import type { Authenticator, UserInfo } from '../types.js';
import { ExpiringCache } from './expiring-cache.js';
import { removeHeaders } from './headers.js';

export interface TokenReviewAuthenticatorOptions {
  /** Audiences a token must be for; empty (the default): kube-apiserver's own. */
  audiences?: string[];
  /** How long an answer is reused, valid or invalid (default 10 s, as upstream's delegated authentication). */
  cacheTtlMs?: number;
  /** Least recently used answers are dropped past this many (default 4096). */
  maxCacheEntries?: number;
  logger?: Logger;
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

type Outcome = { user: UserInfo } | { failure: string };

/**
 * The token of an `Authorization: Bearer <token>` header, as bearertoken.go reads it: the scheme is
 * case-insensitive, the token is the second space-separated field; anything else carries no bearer token.
 */
export function bearerToken(header: string | undefined): string | undefined {
  const auth = header?.trim();
  if (!auth) return undefined;
  const parts = auth.split(' ');
  if (parts.length < 2 || parts[0]!.toLowerCase() !== 'bearer') return undefined;
  return parts[1] || undefined;
}

export class TokenReviewAuthenticator implements Authenticator {
  private readonly cache: ExpiringCache<Outcome>;
  private readonly hmacKey = randomBytes(32);
  private readonly audiences: string[];
  private readonly ttlMs: number;
  private readonly log: Logger;

  constructor(
    private readonly client: KubeClient,
    opts: TokenReviewAuthenticatorOptions = {},
  ) {
    this.audiences = opts.audiences ?? [];
    this.ttlMs = opts.cacheTtlMs ?? 10_000;
    this.cache = new ExpiringCache(opts.maxCacheEntries ?? 4096);
    this.log = (opts.logger ?? silentLogger).child({ authenticator: 'token-review' });
  }

  async authenticate(req: IncomingMessage): Promise<Outcome | undefined> {
    const token = bearerToken(req.headers.authorization);
    if (token === undefined) return undefined;
    const key = createHmac('sha256', this.hmacKey).update(token).digest('base64');
    let outcome: Outcome;
    try {
      outcome = await this.cache.getOrLoad(
        key,
        () => this.review(token),
        () => this.ttlMs,
      );
    } catch (err) {
      this.log.warn({ err }, 'TokenReview failed');
      return { failure: `the bearer token could not be reviewed: ${errorMessage(err)}` };
    }
    // a consumed token must not travel further inside the server (upstream deletes it too)
    if ('user' in outcome) removeHeaders(req, (name) => name === 'authorization');
    return outcome;
  }

  private async review(token: string): Promise<Outcome> {
    const review = await this.client.create<TokenReview>(TokenReviews, {
      apiVersion: 'authentication.k8s.io/v1',
      kind: 'TokenReview',
      metadata: {},
      spec: { token, ...(this.audiences.length ? { audiences: this.audiences } : {}) },
    });
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
