/**
 * The L1 warm queue (docs/extensions.md "Claim: the L1 fast path", step 3): per `<namespace>/<pool>`, the warm,
 * unclaimed Sandboxes a claim may adopt, fed by the Sandbox informer. Ready entries are kept per node so a pick prefers
 * the node with the most warm capacity; not-Ready entries form a FIFO fallback. Every operation is O(1) in the pool
 * size (O(nodes) for a pick).
 *
 * The queue only proposes: exclusivity comes from the adoption write, which is guarded by the candidate's
 * resourceVersion (see claim-controller.ts). A popped entry is out of the queue while its adoption is in flight,
 * so concurrent claims in this process never race for the same Sandbox.
 */

interface Entry {
  node: string;
  ready: boolean;
}

class PoolQueue {
  readonly entries = new Map<string, Entry>();
  /** Ready entries by node ('' = unscheduled); Sets keep insertion order, so the first is the oldest. */
  readonly readyByNode = new Map<string, Set<string>>();
  readonly notReady = new Set<string>();

  upsert(name: string, node: string, ready: boolean): void {
    const have = this.entries.get(name);
    if (have && have.node === node && have.ready === ready) return;
    if (have) this.unlink(name, have);
    const e = { node, ready };
    this.entries.set(name, e);
    if (ready) {
      let s = this.readyByNode.get(node);
      if (!s) this.readyByNode.set(node, (s = new Set()));
      s.add(name);
    } else this.notReady.add(name);
  }

  remove(name: string): boolean {
    const have = this.entries.get(name);
    if (!have) return false;
    this.unlink(name, have);
    this.entries.delete(name);
    return true;
  }

  private unlink(name: string, e: Entry): void {
    if (e.ready) {
      const s = this.readyByNode.get(e.node);
      s?.delete(name);
      if (s && s.size === 0) this.readyByNode.delete(e.node);
    } else this.notReady.delete(name);
  }

  /** Ready first (scheduled ones on the fullest node, else the oldest unscheduled), then the oldest not-Ready. */
  pop(): { name: string; ready: boolean } | undefined {
    let best: Set<string> | undefined;
    for (const [node, s] of this.readyByNode) if (node !== '' && (!best || s.size > best.size)) best = s;
    best ??= this.readyByNode.get('');
    let name: string | undefined;
    let ready = true;
    if (best?.size) name = best.values().next().value;
    if (name === undefined) {
      ready = false;
      name = this.notReady.values().next().value;
    }
    if (name === undefined) return undefined;
    this.remove(name);
    return { name, ready };
  }

  get size(): number {
    return this.entries.size;
  }
}

export class CandidateQueues {
  private readonly pools = new Map<string, PoolQueue>();
  /** Sandbox key -> pool key, so an entry can be found when its Sandbox leaves the pool. */
  private readonly poolOf = new Map<string, string>();
  /** Sandbox keys whose adoption is in flight: informer events must not re-offer them meanwhile. */
  private readonly inflight = new Set<string>();

  /** Record the latest view of a Sandbox: offered when adoptable, withdrawn otherwise. */
  observe(namespace: string, name: string, pool: string | undefined, node: string, ready: boolean): void {
    const key = `${namespace}/${name}`;
    const prevPool = this.poolOf.get(key);
    const poolKey = pool === undefined ? undefined : `${namespace}/${pool}`;
    if (prevPool !== undefined && prevPool !== poolKey) {
      this.pools.get(prevPool)?.remove(name);
      this.poolOf.delete(key);
    }
    if (poolKey === undefined || this.inflight.has(key)) return;
    let q = this.pools.get(poolKey);
    if (!q) this.pools.set(poolKey, (q = new PoolQueue()));
    q.upsert(name, node, ready);
    this.poolOf.set(key, poolKey);
  }

  forget(namespace: string, name: string): void {
    const key = `${namespace}/${name}`;
    const poolKey = this.poolOf.get(key);
    if (poolKey !== undefined) this.pools.get(poolKey)?.remove(name);
    this.poolOf.delete(key);
  }

  /** Take the best candidate of a pool and mark it in flight until `release` or `settle`. */
  take(namespace: string, pool: string): { name: string; ready: boolean } | undefined {
    const q = this.pools.get(`${namespace}/${pool}`);
    const got = q?.pop();
    if (!got) return undefined;
    const key = `${namespace}/${got.name}`;
    this.poolOf.delete(key);
    this.inflight.add(key);
    return got;
  }

  /** The adoption attempt is over; the next informer event decides whether the Sandbox is offered again. */
  settle(namespace: string, name: string): void {
    this.inflight.delete(`${namespace}/${name}`);
  }

  dropPool(namespace: string, pool: string): void {
    const q = this.pools.get(`${namespace}/${pool}`);
    if (!q) return;
    for (const name of q.entries.keys()) this.poolOf.delete(`${namespace}/${name}`);
    this.pools.delete(`${namespace}/${pool}`);
  }

  size(namespace: string, pool: string): number {
    return this.pools.get(`${namespace}/${pool}`)?.size ?? 0;
  }
}
