/**
 * Bearer token authentication by TokenReview v1 (k8s.io/apiserver's delegated webhook token authenticator):
 * kube-apiserver says who a token belongs to. The review and its cache (10 s, valid and invalid answers alike,
 * keyed by an HMAC of the token) are src/kube/reviews.ts's, shared with sandboxd's claim gateway.
 */
import type { IncomingMessage } from 'node:http';
import { errorMessage } from '../../errors.js';
import type { KubeClient } from '../../kube/client.js';
import { ReviewBudget, type ReviewBudgetOptions } from '../../kube/review-budget.js';
import { TokenReviewer, type TokenReviewerOptions } from '../../kube/reviews.js';
import { silentLogger, type Logger } from '../../log/logger.js';
import { tooManyRequests } from '../status.js';
import type { Authenticator, UserInfo } from '../types.js';
import { removeHeaders } from './headers.js';

/** Audiences and the cache (10 s for valid and invalid answers alike, at most 4096) are TokenReviewer's. */
export interface TokenReviewAuthenticatorOptions extends TokenReviewerOptions {
  logger?: Logger;
  /** Bounds on the reviews uncached tokens may cause (src/kube/review-budget.ts). */
  budget?: ReviewBudgetOptions;
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
  private readonly reviewer: TokenReviewer;
  private readonly budget: ReviewBudget;
  private readonly log: Logger;

  constructor(client: KubeClient, opts: TokenReviewAuthenticatorOptions = {}) {
    this.reviewer = new TokenReviewer(client, opts);
    this.budget = new ReviewBudget(opts.budget);
    this.log = (opts.logger ?? silentLogger).child({ authenticator: 'token-review' });
  }

  /**
   * The token's verdict; an uncached token is reviewed only within the budget, else this throws a 429 Status (an
   * unknown token is free to make, a review is not).
   */
  async authenticate(req: IncomingMessage): Promise<Outcome | undefined> {
    const token = bearerToken(req.headers.authorization);
    if (token === undefined) return undefined;
    const key = this.reviewer.keyOf(token);
    let outcome: Outcome | undefined = this.reviewer.cached(token, key);
    if (!outcome) {
      const admission = this.budget.admit(req.socket?.remoteAddress);
      if (!admission.ok)
        throw tooManyRequests(`the bearer token was not reviewed: ${admission.reason}`, admission.retryAfterSeconds);
      try {
        outcome = await this.reviewer.review(token, key);
        admission.done('user' in outcome);
      } catch (err) {
        admission.done(false);
        this.log.warn({ err }, 'TokenReview failed');
        return { failure: `the bearer token could not be reviewed: ${errorMessage(err)}` };
      }
    }
    // a consumed token must not travel further inside the server (upstream deletes it too)
    if ('user' in outcome) removeHeaders(req, (name) => name === 'authorization');
    return outcome;
  }
}
