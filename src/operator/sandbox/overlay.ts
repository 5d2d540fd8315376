import type { KubeObject } from '../../kube/index.js';

/**
 * Read-your-writes over an informer cache. After a write the controller keeps the object the apiserver returned;
 * until the watch delivers that version (or a newer one), reads prefer it. Without this, a reconcile triggered
 * between our write and its watch event would compute from the stale copy and write again (a duplicate status
 * patch with a fresh lastTransitionTime, or a second create that fails AlreadyExists).
 */
export class Overlay<T extends KubeObject> {
  private readonly written = new Map<string, { obj: T; at: number }>();

  constructor(private readonly maxAgeMs = 60_000) {}

  remember(key: string, obj: T): void {
    this.written.set(key, { obj, at: Date.now() });
  }

  forget(key: string): void {
    this.written.delete(key);
  }

  /** What we last wrote under `key`, if recent. */
  peek(key: string): T | undefined {
    const entry = this.written.get(key);
    if (!entry) return undefined;
    if (Date.now() - entry.at > this.maxAgeMs) {
      this.written.delete(key);
      return undefined;
    }
    return entry.obj;
  }

  /** The newer of the cached object and the one we wrote (a deleted or replaced object drops the overlay). */
  resolve(key: string, cached: T | undefined, { whenMissing = false }: { whenMissing?: boolean } = {}): T | undefined {
    const entry = this.written.get(key);
    if (!entry) return cached;
    const ov = entry.obj;
    if (Date.now() - entry.at > this.maxAgeMs) {
      this.written.delete(key);
      return cached;
    }
    if (!cached) {
      if (whenMissing) return ov;
      this.written.delete(key);
      return undefined;
    }
    if (cached.metadata.uid !== ov.metadata.uid || !isNewer(ov, cached)) {
      this.written.delete(key);
      return cached;
    }
    return ov;
  }

  get size(): number {
    return this.written.size;
  }
}

/** resourceVersions are opaque, but etcd's are integers; anything else never prefers the overlay. */
export function isNewer(a: KubeObject, b: KubeObject): boolean {
  const ra = a.metadata.resourceVersion;
  const rb = b.metadata.resourceVersion;
  if (!ra || !rb || !/^\d+$/.test(ra) || !/^\d+$/.test(rb)) return false;
  return BigInt(ra) > BigInt(rb);
}
