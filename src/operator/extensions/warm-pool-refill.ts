/**
 * When a warm pool refills and when it reports (docs/extensions.md "Warm pool", with the newer upstream's refill pacing): the members a
 * claim took are replaced after the claims, not between them, and a refill's status is written once it settles.
 *
 * A refill is a cascade — the Sandbox, its Pod, the scheduler's binding and event, the kubelet's status, the
 * Sandbox's status — and on two cores every one of those writes lands on some claim's critical path. So a refill
 *   1. is debounced: each departure pushes it REFILL_COALESCE_MS out, up to REFILL_MAX_DELAY_MS after the first;
 *   2. then yields to claims still arriving (Foreground.hold: until QUIET_MS without one, at most MAX_HOLD_MS);
 *   3. goes at once, unpaced, when the pool is below half its size (a pool must not run dry to keep claims fast);
 *   4. stops between its slow-start waves when claims start arriving during it (the rest waits for the next pass);
 *   5. respects `--sandbox-warm-pool-max-refill-rate`.
 * The initial fill and scale-ups are not delayed. The pool's status is written at most every
 * STATUS_MIN_INTERVAL_MS while members come and go, and at once when the pool is full and Ready.
 */
import type { Foreground } from '../foreground.js';

export const REFILL_COALESCE_MS = 100;
export const REFILL_MAX_DELAY_MS = 1_000;
export const STATUS_MIN_INTERVAL_MS = 500;

/** Token bucket for `--sandbox-warm-pool-max-refill-rate` (creates per second; 0 = unpaced). */
class RefillPacer {
  private tokens: number;
  private last = Date.now();
  constructor(private readonly rate: number) {
    this.tokens = Math.max(1, rate);
  }
  /** How many of `want` may go now, and when to come back for the rest. */
  take(want: number): { granted: number; retryMs: number } {
    if (this.rate <= 0) return { granted: want, retryMs: 0 };
    const now = Date.now();
    this.tokens = Math.min(Math.max(1, this.rate), this.tokens + ((now - this.last) / 1000) * this.rate);
    this.last = now;
    const granted = Math.min(want, Math.floor(this.tokens));
    this.tokens -= granted;
    return { granted, retryMs: granted < want ? Math.ceil(((1 - (this.tokens % 1)) / this.rate) * 1000) : 0 };
  }
}

export class RefillPolicy {
  private readonly pacers = new Map<string, RefillPacer>();
  /** Pool UID -> the pending refill (debounce state); absent while the pool is full. */
  private readonly refillAt = new Map<string, { first: number; at: number; last: number }>();
  /** Pool UIDs that have been full at least once (their shortfalls are refills). */
  private readonly filled = new Set<string>();
  /** Pool UID -> when its status was last written. */
  private readonly statusAt = new Map<string, number>();

  constructor(
    private readonly maxRefillRate: number,
    private readonly foreground: Foreground,
  ) {}

  forget(poolUid: string): void {
    this.pacers.delete(poolUid);
    this.refillAt.delete(poolUid);
    this.filled.delete(poolUid);
    this.statusAt.delete(poolUid);
    this.foreground.release(holdKey(poolUid));
  }

  /** How long the pool waits before creating the `desired - current` members it lacks (0: now). */
  wait(poolUid: string, current: number, desired: number): number {
    if (current >= desired) {
      this.filled.add(poolUid);
      this.refillAt.delete(poolUid);
      this.foreground.release(holdKey(poolUid));
      return 0;
    }
    if (!this.filled.has(poolUid) || current * 2 < desired) return 0;
    return this.debounce(poolUid, current) || this.foreground.hold(holdKey(poolUid));
  }

  /** Whether claims are arriving now (a yielding refill stops before its next wave). */
  get claimsArriving(): boolean {
    return this.foreground.busy;
  }

  /** How many of `want` creates may go now (the refill-rate limit), and when to come back for the rest. */
  take(poolUid: string, want: number): { granted: number; retryMs: number } {
    let pacer = this.pacers.get(poolUid);
    if (!pacer) this.pacers.set(poolUid, (pacer = new RefillPacer(this.maxRefillRate)));
    return pacer.take(want);
  }

  /** How long a status write of this pool should wait (0: write now); `settled` = full and every member Ready. */
  statusDelay(poolUid: string, settled: boolean): number {
    if (settled) return 0;
    const last = this.statusAt.get(poolUid);
    return last === undefined ? 0 : Math.max(0, last + STATUS_MIN_INTERVAL_MS - Date.now());
  }

  statusWritten(poolUid: string): void {
    this.statusAt.set(poolUid, Date.now());
  }

  private debounce(poolUid: string, current: number): number {
    const now = Date.now();
    let st = this.refillAt.get(poolUid);
    if (!st) this.refillAt.set(poolUid, (st = { first: now, at: now + REFILL_COALESCE_MS, last: current }));
    else if (current < st.last) st.at = Math.min(now + REFILL_COALESCE_MS, st.first + REFILL_MAX_DELAY_MS);
    st.last = current;
    const wait = Math.max(0, st.at - now);
    // This pass refills; the next burst debounces anew.
    if (wait === 0) this.refillAt.set(poolUid, { first: now, at: now, last: current });
    return wait;
  }
}

const holdKey = (poolUid: string) => `pool:${poolUid}`;
