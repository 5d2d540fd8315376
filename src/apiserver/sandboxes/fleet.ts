/**
 * The nodes that serve sandboxes: which exist and where they listen (their NodeInventory objects, through an
 * informer), whether their change feed is live, and how many warm VMs each pool has on each (from the feed, so
 * placement sees a claim's effect within milliseconds, not one inventory publish interval later). Claims are
 * placed by power-of-two choices over the nodes with warm capacity for the key: two random candidates, the one
 * with more warm VMs wins (max-warm-first funnels a burst onto one node; uniform random ignores load).
 */
import type { NodeInventory, ObjectMeta } from '../../api/index.js';
import { poolKeyString, type PoolKeyOf } from '../../api/pool-key.js';
import type { Informer } from '../../kube/index.js';
import type { Logger } from '../../log/logger.js';
import { NodeFeed, type PoolCapacityRow } from './node-feed.js';
import type { SandboxdClient } from './sandboxd-client.js';
import type { SandboxStore } from './store.js';

interface NodeState {
  name: string;
  address: string;
  feed: NodeFeed;
  /** Warm VMs per pool key string, from the feed; adjusted locally by this server's own claims. */
  warm: Map<string, number>;
  targets: Map<string, number>;
  /** The node drains (its feed says so): it refuses claims, so no create is placed there. */
  draining: boolean;
}

export type InventoryObj = NodeInventory & { metadata: ObjectMeta };

export interface Candidate {
  node: string;
  address: string;
  warm: number;
}

export class Fleet {
  private readonly nodes = new Map<string, NodeState>();
  private readonly listeners = new Set<() => void>();
  private stopped = false;

  constructor(
    private readonly inventories: Informer<InventoryObj>,
    private readonly store: SandboxStore,
    private readonly client: SandboxdClient,
    private readonly log: Logger,
    private readonly random: () => number = Math.random,
  ) {
    inventories.addHandler({
      onAdd: (inv) => this.sync(inv),
      onUpdate: (_old, inv) => this.sync(inv),
      onDelete: (inv) => this.forget(inv.metadata.name ?? inv.node),
    });
  }

  /** Called when a node joins, leaves, (re)syncs or reports new pool capacity. */
  onChange(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private changed(): void {
    for (const l of this.listeners) l();
  }

  stop(): void {
    this.stopped = true;
    for (const n of this.nodes.values()) n.feed.stop();
    this.nodes.clear();
  }

  /** Node names with a feed, sorted. */
  nodeNames(): string[] {
    return [...this.nodes.keys()].sort();
  }

  address(node: string): string | undefined {
    return this.nodes.get(node)?.address;
  }

  isSynced(node: string): boolean {
    return this.nodes.get(node)?.feed.isSynced ?? false;
  }

  /** The node says it is draining (docs/sandboxd.md "Draining"): it makes and wakes nothing. */
  isDraining(node: string): boolean {
    return this.nodes.get(node)?.draining ?? false;
  }

  /** Every known node has been synced once (or failed to connect once); readiness waits for this, bounded. */
  allSynced(): boolean {
    return [...this.nodes.values()].every((n) => n.feed.isSynced || n.feed.stats.failures > 0);
  }

  /** Whether any node has ever declared a pool for this key (unknown keys are a clearer error than "no capacity"). */
  servesKey(key: PoolKeyOf): boolean {
    const k = poolKeyString(key);
    for (const n of this.nodes.values()) if (n.targets.has(k) || n.warm.has(k)) return true;
    for (const inv of this.inventories.list())
      for (const p of inv.pools ?? [])
        if (
          poolKeyString({
            template: p.template,
            net: (p.net ?? 'none') as PoolKeyOf['net'],
            size: (p.size ?? 'small') as PoolKeyOf['size'],
          }) === k
        )
          return true;
    return false;
  }

  candidates(key: PoolKeyOf): Candidate[] {
    const k = poolKeyString(key);
    const out: Candidate[] = [];
    for (const n of this.nodes.values()) {
      const warm = n.warm.get(k) ?? 0;
      if (warm > 0 && n.feed.isSynced && !n.draining) out.push({ node: n.name, address: n.address, warm });
    }
    return out;
  }

  /**
   * Synced nodes that can make a VM of `key` on a miss (a clone, or a boot where the node has no clone source yet;
   * sandboxd's claim without warm_only), for a caller that would rather wait for a VM than be told 503: the nodes
   * that keep a pool of the key first (their clone source is ready), then the rest; random within each group.
   */
  provisioners(key: PoolKeyOf): Candidate[] {
    const k = poolKeyString(key);
    const synced = [...this.nodes.values()].filter((n) => n.feed.isSynced && !n.draining);
    const shuffled = synced
      .map((n) => ({ n, r: this.random() }))
      .sort((a, b) => a.r - b.r)
      .map(({ n }) => n);
    const pooled = (n: NodeState) => n.targets.has(k) || n.warm.has(k);
    return [...shuffled.filter(pooled), ...shuffled.filter((n) => !pooled(n))].map((n) => ({
      node: n.name,
      address: n.address,
      warm: n.warm.get(k) ?? 0,
    }));
  }

  /** Power of two choices: two draws with replacement, the one with more warm VMs (ties: the first). */
  pick(candidates: readonly Candidate[]): Candidate | undefined {
    if (candidates.length === 0) return undefined;
    const a = candidates[Math.floor(this.random() * candidates.length)]!;
    const b = candidates[Math.floor(this.random() * candidates.length)]!;
    return b.warm > a.warm ? b : a;
  }

  /** This server took a warm VM of `key` on `node` (or learned there is none): adjust before the feed says so. */
  noteWarm(node: string, key: PoolKeyOf, delta: number | 'empty'): void {
    const n = this.nodes.get(node);
    if (!n) return;
    const k = poolKeyString(key);
    n.warm.set(k, delta === 'empty' ? 0 : Math.max(0, (n.warm.get(k) ?? 0) + delta));
  }

  /** Warm VMs and target of `key` on `node`, as its feed last reported (0/0 when it has no such pool). */
  poolOn(node: string, key: PoolKeyOf): { warm: number; target: number } {
    const n = this.nodes.get(node);
    const k = poolKeyString(key);
    return { warm: n?.warm.get(k) ?? 0, target: n?.targets.get(k) ?? 0 };
  }

  warmTotal(key: PoolKeyOf): number {
    const k = poolKeyString(key);
    let total = 0;
    for (const n of this.nodes.values()) total += n.warm.get(k) ?? 0;
    return total;
  }

  private sync(inv: InventoryObj): void {
    if (this.stopped) return;
    const name = inv.metadata.name ?? inv.node;
    const address = inv.address ?? '';
    const current = this.nodes.get(name);
    if (current && current.address === address) return;
    if (current) {
      this.log.info({ node: name, from: current.address, to: address }, 'node address changed; reconnecting its feed');
      current.feed.stop();
      this.nodes.delete(name);
    }
    if (!address) return;
    const state: NodeState = {
      name,
      address,
      warm: new Map(),
      targets: new Map(),
      draining: false,
      feed: new NodeFeed(
        name,
        address,
        this.client,
        this.store,
        {
          onState: (node, synced) => {
            this.store.setNodeAvailable(node, synced);
            this.changed();
          },
          onPools: (node, pools, draining) => this.setPools(node, pools, draining),
        },
        this.log,
      ),
    };
    this.nodes.set(name, state);
    this.store.setNodeAvailable(name, false);
    state.feed.start();
  }

  private setPools(node: string, pools: PoolCapacityRow[], draining: boolean): void {
    const n = this.nodes.get(node);
    if (!n) return;
    if (n.draining !== draining)
      this.log.info({ node, draining }, draining ? 'node draining: no creates placed there' : 'node undrained');
    n.draining = draining;
    n.warm = new Map(pools.map((p) => [poolKeyString(p.key), p.warm]));
    n.targets = new Map(pools.map((p) => [poolKeyString(p.key), p.target]));
    this.changed();
  }

  private forget(node: string): void {
    const n = this.nodes.get(node);
    n?.feed.stop();
    this.nodes.delete(node);
    this.store.removeNode(node);
    this.log.info({ node }, 'node left the fleet (NodeInventory deleted)');
    this.changed();
  }
}
