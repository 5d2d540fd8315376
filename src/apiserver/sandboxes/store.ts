/**
 * The server's view of every served sandbox, in memory, fed by two writers:
 * - the nodes' change feeds (node-feed.ts): each node's authoritative live set, pushed as it changes;
 * - this server's own creates and deletes (the claim-time index), applied the moment the node answers, so a
 *   client reads its own writes even before the node's feed event arrives.
 * Entries are indexed by `<namespace>/<name>` (sorted, for paging and namespace ranges), by claim id and by node.
 * Nothing here is persisted: the nodes hold the truth, and a restarted server rebuilds from their feeds.
 */
import type { Logger } from '../../log/logger.js';
import { SortedKeys } from '../sorted-keys.js';
import { entryFromRow, sameContent, type NodeRow, type SandboxEntry } from './entry.js';
import { EventLog, type StoreEvent } from './event-log.js';

/** Released claim ids are remembered this long, so a feed event sent before the release cannot resurrect one. */
const TOMBSTONE_MS = 60_000;

export class SandboxStore {
  readonly log: EventLog;
  private readonly byKey = new Map<string, SandboxEntry>();
  private readonly byClaim = new Map<string, SandboxEntry>();
  private readonly byNode = new Map<string, Set<string>>();
  private readonly keys = new SortedKeys();
  private readonly tombstones = new Map<string, number>();
  private readonly unavailable = new Set<string>();
  /**
   * Claims whose sandbox resumed on another node (claim id → the claim that replaced it): a row of one, from a node
   * that comes back, is never served again, and its node is told to release it (`onStale`).
   */
  private readonly moved = new Map<string, string>();
  /** Called with a claim that `moved` superseded when its node reports it again (build.ts releases it there). */
  onStale: ((node: string, address: string, claimId: string) => void) | undefined;

  constructor(
    private readonly logger: Logger,
    log = new EventLog(),
  ) {
    this.log = log;
  }

  get size(): number {
    return this.byKey.size;
  }

  get(key: string): SandboxEntry | undefined {
    return this.byKey.get(key);
  }

  getByClaim(claimId: string): SandboxEntry | undefined {
    return this.byClaim.get(claimId);
  }

  /** Keys in list order: a namespace's (or all, for ''), after `after`. Lazily: callers stop at their limit. */
  keysFrom(namespace: string, after?: string): Generator<string> {
    return this.keys.range(namespace ? `${namespace}/` : '', after);
  }

  /** Every entry of a namespace ('' = all) in list order, as a snapshot array (a watch's initial events). */
  snapshot(namespace: string): SandboxEntry[] {
    const out: SandboxEntry[] = [];
    for (const k of this.keysFrom(namespace)) out.push(this.byKey.get(k)!);
    return out;
  }

  nodeAvailable(node: string): boolean {
    return !this.unavailable.has(node);
  }

  setNodeAvailable(node: string, available: boolean): void {
    if (available) this.unavailable.delete(node);
    else this.unavailable.add(node);
  }

  unavailableNodes(): string[] {
    return [...this.unavailable].sort();
  }

  countOnNode(node: string): number {
    return this.byNode.get(node)?.size ?? 0;
  }

  // ------------------------------------------------------------------ writers

  /** A row from `node`'s feed or a claim answer. Rows without a Kubernetes identity are not served. */
  upsert(node: string, address: string, row: NodeRow): SandboxEntry | undefined {
    if (this.isTombstoned(row.id)) return undefined;
    if (this.moved.has(row.id)) {
      this.onStale?.(node, address, row.id);
      return undefined;
    }
    const existing = this.byClaim.get(row.id);
    if (existing && existing.nodeRv >= row.rv && existing.address === address) return existing;
    const draft = entryFromRow(row, node, address, '');
    if (!draft) return undefined;
    const holder = this.byKey.get(draft.key);
    if (holder && holder.claimId !== draft.claimId && draft.resumedFrom?.claimId === holder.claimId) {
      // The sandbox resumed on another node from its hibernation record (docs/placement.md "Resume anywhere"): the
      // same object, moved. One MODIFIED (new node, new claim), never a DELETED and an ADDED.
      this.moved.set(holder.claimId, draft.claimId);
      this.unindex(holder);
      const rv = this.log.nextVersion();
      const next: SandboxEntry = { ...draft, rv: rv.toString() };
      this.index(next);
      this.log.publish({ rv, type: 'MODIFIED', prev: holder, next });
      this.logger.info(
        { sandbox: draft.key, from: holder.node, to: node, claim: draft.claimId },
        'sandbox moved to another node',
      );
      return next;
    }
    if (holder && holder.claimId !== draft.claimId && holder.resumedFrom?.claimId === draft.claimId) {
      // The claim it moved from, reported by its node (back after the move, or a server restart's feeds in this
      // order): superseded.
      this.moved.set(draft.claimId, holder.claimId);
      this.onStale?.(node, address, draft.claimId);
      return undefined;
    }
    if (holder && holder.claimId !== draft.claimId) {
      // Two live claims under one name can only come from outside this server's create (which refuses a live
      // name): another replica's race, or a direct node API call. Serve the first; the other keeps its lease.
      this.logger.warn(
        { sandbox: draft.key, served: holder.claimId, ignored: draft.claimId, node },
        'a second live claim carries the name of a served sandbox; not serving it',
      );
      return undefined;
    }
    if (existing && sameContent(existing, draft)) {
      // A change readers cannot see (the node's own bookkeeping, a new egress policy, which the Sandbox object does
      // not show): keep the version, note the node's counter and what the e2b API reads.
      const kept: SandboxEntry = {
        ...existing,
        nodeRv: row.rv,
        network: draft.network,
        hibernationCheckpoint: draft.hibernationCheckpoint,
      };
      this.index(kept);
      return kept;
    }
    const rv = this.log.nextVersion();
    const next: SandboxEntry = { ...draft, rv: rv.toString() };
    this.index(next);
    this.log.publish({ rv, type: existing ? 'MODIFIED' : 'ADDED', prev: existing, next });
    return next;
  }

  /** The node says the claim is gone (feed DELETED), or this server released it. */
  remove(claimId: string, opts: { tombstone?: boolean } = {}): SandboxEntry | undefined {
    if (opts.tombstone) this.tombstone(claimId);
    const existing = this.byClaim.get(claimId);
    if (!existing) return undefined;
    this.unindex(existing);
    const rv = this.log.nextVersion();
    const next: SandboxEntry = { ...existing, rv: rv.toString() };
    this.log.publish({ rv, type: 'DELETED', prev: existing, next });
    return next;
  }

  /**
   * A node's feed finished its snapshot: its entries that the snapshot lacks are gone, unless they changed after
   * the snapshot was taken (a claim this server made while the snapshot was in flight).
   */
  reconcileNode(node: string, snapshotRv: number, present: ReadonlySet<string>): number {
    let removed = 0;
    for (const key of [...(this.byNode.get(node) ?? [])]) {
      const e = this.byKey.get(key);
      if (e && !present.has(e.claimId) && e.nodeRv <= snapshotRv) {
        this.remove(e.claimId);
        removed++;
      }
    }
    return removed;
  }

  /** The node left the fleet (its NodeInventory was deleted): everything it held is gone. */
  removeNode(node: string): void {
    for (const key of [...(this.byNode.get(node) ?? [])]) {
      const e = this.byKey.get(key);
      if (e) this.remove(e.claimId);
    }
    this.byNode.delete(node);
    this.unavailable.delete(node);
  }

  private index(e: SandboxEntry): void {
    const old = this.byClaim.get(e.claimId);
    if (old && old.node !== e.node) this.byNode.get(old.node)?.delete(old.key);
    this.byKey.set(e.key, e);
    this.byClaim.set(e.claimId, e);
    this.keys.insert(e.key);
    let set = this.byNode.get(e.node);
    if (!set) this.byNode.set(e.node, (set = new Set()));
    set.add(e.key);
  }

  private unindex(e: SandboxEntry): void {
    this.byClaim.delete(e.claimId);
    if (this.byKey.get(e.key)?.claimId === e.claimId) {
      this.byKey.delete(e.key);
      this.keys.delete(e.key);
    }
    this.byNode.get(e.node)?.delete(e.key);
  }

  private tombstone(claimId: string): void {
    const now = Date.now();
    this.tombstones.set(claimId, now + TOMBSTONE_MS);
    if (this.tombstones.size > 10_000)
      for (const [id, until] of this.tombstones) if (until <= now) this.tombstones.delete(id);
  }

  private isTombstoned(claimId: string): boolean {
    const until = this.tombstones.get(claimId);
    if (until === undefined) return false;
    if (until > Date.now()) return true;
    this.tombstones.delete(claimId);
    return false;
  }
}

export type { StoreEvent };
