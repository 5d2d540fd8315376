/**
 * A stream's outgoing messages between a producer (a guest process's output, a watch) and one consumer (a Connect
 * response). Past `highWater` items the producer is told to wait (push returns a promise; the guest is held back by
 * the agent's flow control), past `hardCap` the consumer is given up on: a client that stops reading cannot hold a
 * process still forever. Keepalives are sent while nothing else is, so idle streams survive proxies.
 */
export class EventQueue<T> implements AsyncIterable<T> {
  private readonly items: T[] = [];
  private wake: (() => void) | undefined;
  private drained: Array<() => void> = [];
  private ended = false;
  private failure: Error | undefined;
  private keepalive: NodeJS.Timeout | undefined;

  constructor(
    private readonly opts: { highWater?: number; hardCap?: number; keepalive?: { everyMs: number; item: T } } = {},
  ) {
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

  /** Queue an item; a promise when the consumer is behind (settles once it caught up or went away). */
  push(item: T): Promise<void> | undefined {
    if (this.ended) return undefined;
    if (this.items.length >= (this.opts.hardCap ?? 4096)) {
      this.fail(new Error('the client stopped reading this stream; it was closed'));
      return undefined;
    }
    this.items.push(item);
    this.wake?.();
    if (this.items.length < (this.opts.highWater ?? 64)) return undefined;
    return new Promise((r) => this.drained.push(r));
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
          const item = this.items.shift()!;
          if (this.items.length < (this.opts.highWater ?? 64) / 2) this.release();
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
