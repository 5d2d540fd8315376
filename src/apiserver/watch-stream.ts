/**
 * A watch response (k8s.io/apiserver pkg/endpoints/handlers/watch.go): 200 with headers flushed at once, then one
 * compact JSON event per line, each written as it happens. Events are filtered per watcher with Kubernetes'
 * selector semantics (an object that stops matching is DELETED for this watcher, one that starts matching
 * ADDED). WatchList (`sendInitialEvents=true`) sends the current state as ADDED events, then a BOOKMARK annotated
 * `k8s.io/initial-events-end`. A client that stops reading is disconnected once a bounded backlog builds up
 * (it relists), so one slow watcher cannot grow the server's memory.
 */
import type { ServerResponse } from 'node:http';
import type { Shape } from './negotiation.js';
import { renderOne, table, type Renderer } from './render.js';

export interface WatchEventOf<T> {
  type: 'ADDED' | 'MODIFIED' | 'DELETED';
  prev: T | undefined;
  next: T;
}

export interface WatchStreamOptions<T> {
  res: ServerResponse;
  renderer: Renderer<T>;
  shape: Shape;
  query: URLSearchParams;
  matches(item: T): boolean;
  /** The bookmark object (our kind, only metadata.resourceVersion [+ annotations]). */
  bookmark(rv: string, initialEventsEnd: boolean): unknown;
  bookmarks: boolean;
  timeoutMs: number;
  /** Disconnect when this many bytes are queued in the socket and not yet taken by the client. */
  maxBacklogBytes?: number;
  onClose(): void;
}

const BOOKMARK_INTERVAL_MS = 60_000;
const MAX_HELD_EVENTS = 100_000;

export class WatchStream<T> {
  private closed = false;
  private first = true;
  private readonly timers: NodeJS.Timeout[] = [];
  private readonly maxBacklog: number;
  private lastRv = '';
  /** Live events that arrived while the initial state was being written. */
  private readonly held: WatchEventOf<T>[] = [];
  private replaying = false;

  constructor(private readonly o: WatchStreamOptions<T>) {
    this.maxBacklog = o.maxBacklogBytes ?? 16 << 20;
    o.res.writeHead(200, {
      'content-type': 'application/json',
      'cache-control': 'no-cache, private',
      'x-content-type-options': 'nosniff',
    });
    o.res.flushHeaders();
    o.res.on('close', () => this.close());
    this.timers.push(setTimeout(() => this.close(), o.timeoutMs));
    if (o.bookmarks)
      this.timers.push(
        setInterval(
          () => this.lastRv && this.write('BOOKMARK', this.o.bookmark(this.lastRv, false)),
          BOOKMARK_INTERVAL_MS,
        ),
      );
    for (const t of this.timers) t.unref();
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /**
   * Initial state (RV 0, or WatchList): ADDED for each match, written as the client takes it (a fleet's worth of
   * objects is more than any socket buffer), while live events wait in order behind it.
   */
  async initial(items: readonly T[], endRv: string | undefined): Promise<void> {
    this.replaying = true;
    for (const item of items) {
      if (this.closed) return;
      if (!this.o.matches(item)) continue;
      if (!this.send('ADDED', item)) await this.drainedOrClosed();
    }
    if (endRv !== undefined) {
      this.lastRv = endRv;
      this.write('BOOKMARK', this.o.bookmark(endRv, true));
    }
    this.replaying = false;
    for (const ev of this.held.splice(0)) this.deliver(ev);
  }

  deliver(ev: WatchEventOf<T>): void {
    if (this.closed) return;
    if (this.replaying) {
      this.held.push(ev);
      if (this.held.length > MAX_HELD_EVENTS) this.close();
      return;
    }
    const now = ev.type !== 'DELETED' && this.o.matches(ev.next);
    const before = ev.prev !== undefined && this.o.matches(ev.prev);
    let type: 'ADDED' | 'MODIFIED' | 'DELETED' | undefined;
    if (ev.type === 'DELETED') type = before ? 'DELETED' : undefined;
    else if (now) type = before ? 'MODIFIED' : 'ADDED';
    else if (before) type = 'DELETED';
    this.lastRv = this.o.renderer.metadataOf(ev.next).resourceVersion ?? this.lastRv;
    if (type && !this.send(type, ev.next) && this.o.res.writableLength > this.maxBacklog) this.close();
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const t of this.timers) clearTimeout(t);
    if (!this.o.res.writableEnded) this.o.res.end();
    this.o.onClose();
  }

  /**
   * Waits for the socket to take the backlog or for the client to go. Both listeners come off whichever fires: a
   * fleet's initial state waits thousands of times on one response, and a 'close' listener left per wait grew
   * without bound (Node's MaxListenersExceededWarning under the 50k fill).
   */
  private drainedOrClosed(): Promise<void> {
    const res = this.o.res;
    return new Promise<void>((resolve) => {
      const done = () => {
        res.off('drain', done).off('close', done);
        resolve();
      };
      res.once('drain', done).once('close', done);
    });
  }

  /** False when the socket buffer is full (the caller waits for 'drain', or gives up on a stuck client). */
  private send(type: 'ADDED' | 'MODIFIED' | 'DELETED', item: T): boolean {
    const { shape, renderer, query } = this.o;
    const object =
      shape.kind === 'table'
        ? table(
            renderer,
            [item],
            shape,
            query,
            { resourceVersion: renderer.metadataOf(item).resourceVersion ?? '' },
            this.first,
          )
        : renderOne(renderer, item, shape, query);
    this.first = false;
    return this.write(type, object);
  }

  private write(type: string, object: unknown): boolean {
    if (this.closed) return true;
    return this.o.res.write(`${JSON.stringify({ type, object })}\n`);
  }
}
