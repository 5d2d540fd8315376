import { setTimeout as sleep } from 'node:timers/promises';

/**
 * Client-side QPS/burst limiting, as client-go's flowcontrol token bucket does (`take` waits for a token); servers
 * that refuse instead of waiting use `tryTake`, `give` and `retryAfterSeconds` (review-budget.ts).
 */
export class TokenBucket {
  private tokens: number;
  private last = performance.now();

  constructor(
    private readonly ratePerSec: number,
    private readonly burst: number,
  ) {
    this.tokens = burst;
  }

  /** Take a token, waiting for one if there is none. */
  async take(): Promise<void> {
    while (!this.tryTake()) await sleep(Math.ceil(((1 - this.tokens) / this.ratePerSec) * 1000));
  }

  /** Take a token if there is one now, without waiting; whether one was taken. */
  tryTake(now = performance.now()): boolean {
    this.refill(now);
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }

  /** Put a token back (never beyond the burst). */
  give(now = performance.now()): void {
    this.refill(now);
    this.tokens = Math.min(this.burst, this.tokens + 1);
  }

  /** Whole seconds until a token is there, at least 1 (a Retry-After). */
  retryAfterSeconds(): number {
    return Math.max(1, Math.ceil((1 - this.tokens) / this.ratePerSec));
  }

  private refill(now: number): void {
    this.tokens = Math.min(this.burst, this.tokens + ((now - this.last) / 1000) * this.ratePerSec);
    this.last = now;
  }
}
