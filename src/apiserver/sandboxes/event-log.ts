/**
 * Every change the store applies, numbered by this server's resourceVersions and kept in a ring, so a watch can
 * start from any recent version and see each change after it exactly once, in order (no polling: the reference
 * system re-listed the fleet every second and missed anything created and deleted in between). A version older
 * than the ring is answered 410 Expired, and the client relists.
 */
import { ResourceVersions } from '../resource-version.js';
import type { SandboxEntry } from './entry.js';

export interface StoreEvent {
  readonly rv: bigint;
  readonly type: 'ADDED' | 'MODIFIED' | 'DELETED';
  /** The entry before the change (MODIFIED, DELETED). */
  readonly prev: SandboxEntry | undefined;
  /** The entry after it; for DELETED, the last state stamped with the deletion's version. */
  readonly next: SandboxEntry;
}

export interface EventSink {
  deliver(ev: StoreEvent): void;
}

export class EventLog {
  readonly versions: ResourceVersions;
  private readonly ring: Array<StoreEvent | undefined>;
  /** Counter of the oldest event in the ring (counters are contiguous from there to `versions.counter`). */
  private first = 1n;
  private readonly sinks = new Set<EventSink>();

  constructor(capacity = 100_000, versions = new ResourceVersions()) {
    this.ring = new Array<StoreEvent | undefined>(capacity);
    this.versions = versions;
  }

  get watchers(): number {
    return this.sinks.size;
  }

  /** The next resourceVersion, for an entry about to be published with `publish`. */
  nextVersion(): bigint {
    return this.versions.next();
  }

  publish(ev: StoreEvent): void {
    const c = ev.rv & 0xffffffffn;
    const cap = BigInt(this.ring.length);
    this.ring[Number(c % cap)] = ev;
    if (c - this.first >= cap) this.first = c - cap + 1n;
    for (const s of this.sinks) s.deliver(ev);
  }

  subscribe(sink: EventSink): () => void {
    this.sinks.add(sink);
    return () => this.sinks.delete(sink);
  }

  /**
   * The events after `rv` (an RV string from a client), oldest first; undefined when the ring no longer holds
   * them all, or the RV is not one of this incarnation's (then the client must relist: 410).
   */
  since(rv: string): StoreEvent[] | undefined {
    const c = this.versions.counterOf(rv);
    if (c === undefined) return undefined;
    const last = this.versions.counter;
    if (c > last) return undefined;
    if (c + 1n < this.first && c < last) return undefined;
    const out: StoreEvent[] = [];
    const cap = BigInt(this.ring.length);
    for (let i = c + 1n; i <= last; i++) {
      const ev = this.ring[Number(i % cap)];
      if (ev) out.push(ev);
    }
    return out;
  }
}
