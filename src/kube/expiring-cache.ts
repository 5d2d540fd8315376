/**
 * A bounded map whose entries expire: the 10 s TokenReview and SubjectAccessReview caches of k8s.io/apiserver's
 * delegated authentication and authorization (sandbox-apiserver) and of sandboxd's claim gateway. Least recently
 * used entries go first when it is full, so a flood of distinct keys (garbage tokens, many users) costs memory up
 * to the bound and no more. Concurrent misses on one key share a single load (as upstream's token cache does with
 * singleflight), so a burst of requests carrying the same new token makes one review, not one each. Time is
 * monotonic (performance.now), immune to clock steps.
 *
 * Two options for a caller that must not wait on the source (the claim gateway, whose warm claim costs ~0.1 ms):
 * - `refreshAhead`: a hit past that fraction of its TTL starts a reload in the background, so an entry in steady
 *   use is replaced before it expires and no request waits for a review; a changed verdict (revoked RBAC) still
 *   takes effect within the TTL, as soon as the reload answers.
 * - `staleMs`: an expired entry is still served for this long while its reload is in flight or failing (the source
 *   is down or slow), instead of failing or holding every request; once a reload answers, its value is used.
 */
export interface ExpiringCacheOptions {
  /** A hit past this fraction of its TTL (0 < f < 1) reloads the entry in the background; off when omitted. */
  refreshAhead?: number;
  /** Serve an expired entry this much longer (ms) while its reload is in flight or failed; 0 (default): never. */
  staleMs?: number;
}

interface Entry<V> {
  value: V;
  storedAt: number;
  expiresAt: number;
  reloadFailed: boolean;
}

export class ExpiringCache<V> {
  private readonly entries = new Map<string, Entry<V>>();
  private readonly loading = new Map<string, Promise<V>>();
  private readonly refreshAhead: number | undefined;
  private readonly staleMs: number;

  constructor(
    private readonly maxEntries: number,
    opts: ExpiringCacheOptions = {},
  ) {
    if (!Number.isInteger(maxEntries) || maxEntries < 1)
      throw new RangeError(`ExpiringCache: maxEntries must be a positive integer, not ${maxEntries}`);
    const f = opts.refreshAhead;
    if (f !== undefined && !(f > 0 && f < 1))
      throw new RangeError(`ExpiringCache: refreshAhead must be between 0 and 1, not ${f}`);
    this.refreshAhead = f;
    this.staleMs = Math.max(0, opts.staleMs ?? 0);
  }

  get size(): number {
    return this.entries.size;
  }

  /** The entry if it is fresh (moved to most recently used); an entry past its stale window is dropped. */
  private fresh(key: string, now: number): Entry<V> | undefined {
    const e = this.entries.get(key);
    if (!e) return undefined;
    if (now >= e.expiresAt + this.staleMs) {
      this.entries.delete(key);
      return undefined;
    }
    // re-insert: a Map iterates in insertion order, so the first key is always the least recently used
    this.entries.delete(key);
    this.entries.set(key, e);
    return now < e.expiresAt ? e : undefined;
  }

  get(key: string): V | undefined {
    return this.fresh(key, performance.now())?.value;
  }

  set(key: string, value: V, ttlMs: number): void {
    this.entries.delete(key);
    if (ttlMs <= 0) return;
    const now = performance.now();
    this.entries.set(key, { value, storedAt: now, expiresAt: now + ttlMs, reloadFailed: false });
    while (this.entries.size > this.maxEntries) {
      const oldest = this.entries.keys().next().value as string;
      this.entries.delete(oldest);
    }
  }

  /**
   * Without waiting: a fresh value (past `refreshAhead` of its TTL, a background reload is started), or, within
   * `staleMs` after expiry while a reload is in flight or failed, the expired one (a reload is started if none
   * is in flight). Undefined when the caller must wait for getOrLoad.
   */
  peek(key: string, load: () => Promise<V>, ttlOf: (value: V) => number): V | undefined {
    const now = performance.now();
    const e = this.entries.get(key);
    if (!e) return undefined;
    if (now < e.expiresAt) {
      this.fresh(key, now);
      if (this.refreshAhead !== undefined && now >= e.storedAt + (e.expiresAt - e.storedAt) * this.refreshAhead)
        this.startReload(key, load, ttlOf);
      return e.value;
    }
    if (now < e.expiresAt + this.staleMs && (e.reloadFailed || this.loading.has(key))) {
      this.startReload(key, load, ttlOf);
      return e.value;
    }
    return undefined;
  }

  /**
   * The cached value, or the one `load` resolves to, kept for `ttlOf(value)` ms (0: not kept). A rejected load
   * is never cached: a failed review says nothing about the credential, so the next request asks again. With
   * `staleMs`, a failed load falls back to an entry that expired less than `staleMs` ago.
   */
  async getOrLoad(key: string, load: () => Promise<V>, ttlOf: (value: V) => number): Promise<V> {
    const hit = this.get(key);
    if (hit !== undefined) return hit;
    const p = this.loading.get(key) ?? this.load(key, load, ttlOf);
    if (this.staleMs === 0) return p;
    try {
      return await p;
    } catch (err) {
      const e = this.entries.get(key);
      if (e && performance.now() < e.expiresAt + this.staleMs) return e.value;
      throw err;
    }
  }

  private startReload(key: string, load: () => Promise<V>, ttlOf: (value: V) => number): void {
    if (this.loading.has(key)) return;
    // the failure is recorded on the entry (load); nobody waits for this promise
    this.load(key, load, ttlOf).catch(() => undefined);
  }

  private load(key: string, load: () => Promise<V>, ttlOf: (value: V) => number): Promise<V> {
    // load runs in a later microtask, so even one that throws at once finds its entry in `loading` to remove
    const p = Promise.resolve()
      .then(load)
      .then(
        (value) => {
          this.set(key, value, ttlOf(value));
          return value;
        },
        (err: unknown) => {
          const e = this.entries.get(key);
          if (e) e.reloadFailed = true;
          throw err;
        },
      )
      .finally(() => this.loading.delete(key));
    this.loading.set(key, p);
    return p;
  }
}
