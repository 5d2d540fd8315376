/**
 * A stream's outgoing messages between a producer (a guest process's output, a watch) and one consumer (a Connect
 * response), counted in bytes (`sizeOf` each item, plus a fixed cost per item so a flood of tiny ones counts too):
 * past `highWater` bytes the producer is told to wait (push returns a promise; the guest is held back by the
 * agent's flow control), past `hardCap` bytes the consumer is given up on: a client that stops reading cannot hold a
 * process still forever, nor a guest that ignores the wait grow this queue. Keepalives are sent while nothing else
 * is, so idle streams survive proxies.
 */

/** What one queued item costs besides its payload (the message object around it). */
export const ITEM_OVERHEAD_BYTES = 128;
/** Defaults: a stream's flow-control window ahead of its consumer, and 16 MiB before it is given up on. */
const HIGH_WATER_BYTES = 256 << 10;
const HARD_CAP_BYTES = 16 << 20;

export interface EventQueueOptions<T> {
  /** @default 256 KiB */
  highWater?: number;
  /** @default 16 MiB */
  hardCap?: number;
  /** The payload bytes of an item. @default 0 (the item costs ITEM_OVERHEAD_BYTES) */
  sizeOf?: (item: T) => number;
  keepalive?: { everyMs: number; item: T };
}

export class EventQueue<T> implements AsyncIterable<T> {
  private readonly items: { item: T; size: number }[] = [];
  private bytes = 0;
  private wake: (() => void) | undefined;
  private drained: Array<() => void> = [];
  private ended = false;
  private failure: Error | undefined;
  private keepalive: NodeJS.Timeout | undefined;

  constructor(private readonly opts: EventQueueOptions<T> = {}) {
    const k = opts.keepalive;
    if (k && k.everyMs > 0) {
      this.keepalive = setInterval(() => {
        if (this.items.length === 0) this.push(k.item);
      }, k.everyMs);
      this.keepalive.unref();
    }
  }

  get closed(): boolean {
    return this.ended;
  }

  /** Bytes queued (payloads and per-item cost). */
  get queuedBytes(): number {
    return this.bytes;
  }

  /** Queue an item; a promise when the consumer is behind (settles once it caught up or went away). */
  push(item: T): Promise<void> | undefined {
    if (this.ended) return undefined;
    const size = (this.opts.sizeOf?.(item) ?? 0) + ITEM_OVERHEAD_BYTES;
    if (this.bytes + size > (this.opts.hardCap ?? HARD_CAP_BYTES)) {
      this.fail(new Error('the client stopped reading this stream; it was closed'));
      return undefined;
    }
    this.items.push({ item, size });
    this.bytes += size;
    this.wake?.();
    if (this.bytes < this.highWater) return undefined;
    return new Promise((r) => this.drained.push(r));
  }

  private get highWater(): number {
    return this.opts.highWater ?? HIGH_WATER_BYTES;
  }

  /** No more items; the consumer ends after the queued ones (or with `err`, thrown to it). */
  close(err?: Error): void {
    if (this.ended) return;
    this.ended = true;
    this.failure = err;
    if (this.keepalive) clearInterval(this.keepalive);
    this.wake?.();
    this.release();
  }

  private fail(err: Error): void {
    this.items.length = 0;
    this.bytes = 0;
    this.close(err);
  }

  private release(): void {
    const d = this.drained;
    this.drained = [];
    for (const r of d) r();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<T> {
    try {
      for (;;) {
        while (this.items.length) {
          const { item, size } = this.items.shift()!;
          this.bytes -= size;
          if (this.bytes < this.highWater / 2) this.release();
          yield item;
        }
        if (this.ended) {
          if (this.failure) throw this.failure;
          return;
        }
        await new Promise<void>((r) => (this.wake = r));
        this.wake = undefined;
      }
    } finally {
      // The consumer left (client went away): the producer must not wait for it.
      if (!this.ended) this.close();
    }
  }
}
