/**
 * How many TokenReviews unauthenticated callers may cause (issue 28, item 4). Every bearer token that is not in the
 * verdict cache costs a TokenReview on kube-apiserver, and an unknown token is free to make: without a bound, one
 * connection sending garbage tokens turned sandbox-apiserver and sandboxd's claim listener into TokenReview
 * amplifiers. Two bounds, checked before a review of an uncached token is started:
 * - in flight: at most `maxInFlight` reviews at once on this listener (the rest are refused with 429 at once, not
 *   queued: a queue would hold their requests, and their bodies, in memory);
 * - negative verdicts: a review costs a token from the caller's bucket (by remote address) and from a listener-wide
 *   one; a valid token gives it back. A flood of bad tokens therefore empties the buckets after `failureBurst`
 *   reviews and is held to `failuresPerSecond` reviews per second, while callers whose tokens are cached (every
 *   client in steady use) are not affected at all.
 * A review that fails (kube-apiserver down) counts as negative: it says nothing good about the token.
 */
import { TokenBucket } from './token-bucket.js';

export interface ReviewBudgetOptions {
  /** Reviews in flight at once (default 64). */
  maxInFlight?: number;
  /** Reviews per second one remote address may make once its burst is spent, unless they succeed (default 2). */
  failuresPerSecond?: number;
  /** Reviews one remote address may make at once before its rate applies (default 20). */
  failureBurst?: number;
  /** The same for the whole listener (defaults 50/s, burst 500). */
  globalFailuresPerSecond?: number;
  globalFailureBurst?: number;
  /** Remote addresses tracked (least recently seen dropped first; default 4096). */
  maxSources?: number;
}

export type Admission =
  | { ok: true; /** Call once with the verdict: a valid token returns its tokens. */ done(valid: boolean): void }
  | { ok: false; reason: string; retryAfterSeconds: number };

export class ReviewBudget {
  private inFlight = 0;
  private readonly maxInFlight: number;
  private readonly perSource: { rate: number; burst: number };
  private readonly global: TokenBucket;
  private readonly sources = new Map<string, TokenBucket>();
  private readonly maxSources: number;

  constructor(opts: ReviewBudgetOptions = {}) {
    this.maxInFlight = opts.maxInFlight ?? 64;
    this.perSource = { rate: opts.failuresPerSecond ?? 2, burst: opts.failureBurst ?? 20 };
    this.global = new TokenBucket(opts.globalFailuresPerSecond ?? 50, opts.globalFailureBurst ?? 500);
    this.maxSources = opts.maxSources ?? 4096;
  }

  get reviewsInFlight(): number {
    return this.inFlight;
  }

  private bucketOf(source: string): TokenBucket {
    let b = this.sources.get(source);
    if (b)
      this.sources.delete(source); // re-inserted below: the first key is always the least recently seen
    else b = new TokenBucket(this.perSource.rate, this.perSource.burst);
    this.sources.set(source, b);
    while (this.sources.size > this.maxSources) this.sources.delete(this.sources.keys().next().value as string);
    return b;
  }

  /** Whether a review for a caller at `source` (its remote address) may start now. */
  admit(source: string | undefined): Admission {
    if (this.inFlight >= this.maxInFlight)
      return { ok: false, reason: `${this.inFlight} token reviews are already in flight`, retryAfterSeconds: 1 };
    const now = performance.now();
    const mine = this.bucketOf(source ?? '');
    if (!mine.tryTake(now))
      return {
        ok: false,
        reason: 'too many unknown or invalid bearer tokens from this address',
        retryAfterSeconds: mine.retryAfterSeconds(),
      };
    if (!this.global.tryTake(now)) {
      mine.give(now);
      return {
        ok: false,
        reason: 'too many unknown or invalid bearer tokens',
        retryAfterSeconds: this.global.retryAfterSeconds(),
      };
    }
    this.inFlight++;
    let finished = false;
    return {
      ok: true,
      done: (valid) => {
        if (finished) return;
        finished = true;
        this.inFlight--;
        if (!valid) return;
        const t = performance.now();
        mine.give(t);
        this.global.give(t);
      },
    };
  }
}
