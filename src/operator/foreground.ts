/**
 * Claims before background work. A claim waiting for a Sandbox is foreground: its three writes are all a client
 * waits for. The writes a claim sets off — the pool's refill, the adopted Pod's metadata sync, the claim's
 * annotations — are background: on two cores each one competes with the next claim's writes in the apiserver and
 * etcd, and a refill burst in the middle of a run of claims was the serial tail (PERFORMANCE.md, "Claims under
 * load"). Background work asks `hold(key)` first and waits while claims are arriving, but never longer than
 * `MAX_HOLD_MS` in a row, so it still happens under sustained load.
 *
 * One instance per manager (`foregroundOf`), shared by the claim controller (which reports) and the warm-pool and
 * Sandbox controllers (which yield).
 */

/** Claims count as arriving until none was seen for this long. */
export const QUIET_MS = 200;
/** The longest background work waits in a row; then it goes, claims or not. */
export const MAX_HOLD_MS = 2_000;

export class Foreground {
  private lastSeen = -Infinity;
  private inflight = 0;
  /** key -> when its work was first held (cleared when it goes). */
  private readonly heldSince = new Map<string, number>();

  constructor(private readonly now: () => number = () => performance.now()) {}

  /** A claim waiting for a Sandbox was seen (its informer event). */
  touch(): void {
    this.lastSeen = this.now();
  }

  /** A pass of a claim that waits for a Sandbox starts; `end` when the claim is Ready or the pass is over. */
  begin(): void {
    this.inflight++;
    this.touch();
  }

  end(): void {
    this.inflight = Math.max(0, this.inflight - 1);
    this.touch();
  }

  /** Whether claims are arriving now. */
  get busy(): boolean {
    return this.inflight > 0 || this.now() - this.lastSeen < QUIET_MS;
  }

  /**
   * How long the background work named `key` should wait before it tries again: 0 means go now. Work held for
   * `MAX_HOLD_MS` goes even while claims keep arriving.
   */
  hold(key: string): number {
    const now = this.now();
    if (!this.busy) {
      this.heldSince.delete(key);
      return 0;
    }
    let since = this.heldSince.get(key);
    if (since === undefined) {
      if (this.heldSince.size > 10_000) this.prune(now);
      this.heldSince.set(key, (since = now));
    }
    const left = since + MAX_HOLD_MS - now;
    if (left <= 0) {
      this.heldSince.delete(key);
      return 0;
    }
    const quietIn = this.inflight > 0 ? QUIET_MS : this.lastSeen + QUIET_MS - now;
    return Math.max(1, Math.ceil(Math.min(left, quietIn)));
  }

  /** Forget a key whose work is gone (its object deleted). */
  release(key: string): void {
    this.heldSince.delete(key);
  }

  private prune(now: number): void {
    for (const [k, since] of this.heldSince) if (now - since > MAX_HOLD_MS) this.heldSince.delete(k);
  }
}

const byManager = new WeakMap<object, Foreground>();

/** The manager's Foreground (created on first use). */
export function foregroundOf(manager: object): Foreground {
  let f = byManager.get(manager);
  if (!f) byManager.set(manager, (f = new Foreground()));
  return f;
}
