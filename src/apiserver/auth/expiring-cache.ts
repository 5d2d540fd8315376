/**
 * A bounded map whose entries expire: the 10 s TokenReview and SubjectAccessReview caches of k8s.io/apiserver's
 * delegated authentication and authorization. Least recently used entries go first when it is full, so a flood of
 * distinct keys (garbage tokens, many users) costs memory up to the bound and no more. Concurrent misses on one
 * key share a single load (as upstream's token cache does with singleflight), so a burst of requests carrying
 * the same new token makes one review, not one each. Time is monotonic (performance.now), immune to clock steps.
 */
export class ExpiringCache<V> {
  private readonly entries = new Map<string, { value: V; expiresAt: number }>();
  private readonly loading = new Map<string, Promise<V>>();

  constructor(private readonly maxEntries: number) {
    if (!Number.isInteger(maxEntries) || maxEntries < 1)
      throw new RangeError(`ExpiringCache: maxEntries must be a positive integer, not ${maxEntries}`);
  }

  get size(): number {
    return this.entries.size;
  }

  get(key: string): V | undefined {
    const e = this.entries.get(key);
    if (!e) return undefined;
    if (performance.now() >= e.expiresAt) {
      this.entries.delete(key);
      return undefined;
    }
    // re-insert: a Map iterates in insertion order, so the first key is always the least recently used
    this.entries.delete(key);
    this.entries.set(key, e);
    return e.value;
  }

  set(key: string, value: V, ttlMs: number): void {
    this.entries.delete(key);
    if (ttlMs <= 0) return;
    this.entries.set(key, { value, expiresAt: performance.now() + ttlMs });
    while (this.entries.size > this.maxEntries) {
      const oldest = this.entries.keys().next().value as string;
      this.entries.delete(oldest);
    }
  }

  /**
   * The cached value, or the one `load` resolves to, kept for `ttlOf(value)` ms (0: not kept). A rejected load
   * is never cached: a failed review says nothing about the credential, so the next request asks again.
   */
  async getOrLoad(key: string, load: () => Promise<V>, ttlOf: (value: V) => number): Promise<V> {
    const hit = this.get(key);
    if (hit !== undefined) return hit;
    const pending = this.loading.get(key);
    if (pending) return pending;
    // load runs in a later microtask, so even one that throws at once finds its entry in `loading` to remove
    const p = Promise.resolve()
      .then(load)
      .then((value) => {
        this.set(key, value, ttlOf(value));
        return value;
      })
      .finally(() => this.loading.delete(key));
    this.loading.set(key, p);
    return p;
  }
}
