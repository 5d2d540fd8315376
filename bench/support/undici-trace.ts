/**
 * Where an HTTP client's time goes, from undici's diagnostics channels (`undici:request:create` / `headers` /
 * `trailers`, published by every copy of undici in the process, Node's own fetch included): each request's
 * method and path, when it was created, when its response headers came and when its body ended. The e2b SDK builds
 * its own undici dispatcher (HTTP/2, connection limits), so wrapping `globalThis.fetch` would see none of its
 * requests; the channels see them all.
 */
import dc from 'node:diagnostics_channel';

export interface TracedRequest {
  label: string;
  startMs: number;
  headersMs?: number;
  endMs?: number;
}

interface UndiciRequest {
  method?: string;
  origin?: string;
  path?: string;
}

/** Sandbox ids and similar tokens in a path, replaced so one kind of request has one label. */
const normalize = (path: string) =>
  path
    .split('?')[0]!
    .replace(/\/(sb_|ck_|i)[0-9a-z]{8,}/g, '/:id')
    .replace(/\/[0-9a-f]{16,}/g, '/:id');

export class RequestTrace {
  private readonly open = new WeakMap<object, TracedRequest>();
  private recording: TracedRequest[] | undefined;
  private readonly onCreate = (m: unknown) => {
    if (!this.recording) return;
    const r = (m as { request: UndiciRequest & object }).request;
    const t: TracedRequest = { label: `${r.method ?? '?'} ${normalize(r.path ?? '')}`, startMs: performance.now() };
    this.open.set(r, t);
    this.recording.push(t);
  };
  private readonly onHeaders = (m: unknown) => {
    const t = this.open.get((m as { request: object }).request);
    if (t) t.headersMs = performance.now();
  };
  private readonly onTrailers = (m: unknown) => {
    const t = this.open.get((m as { request: object }).request);
    if (t) t.endMs = performance.now();
  };

  constructor() {
    dc.subscribe('undici:request:create', this.onCreate);
    dc.subscribe('undici:request:headers', this.onHeaders);
    dc.subscribe('undici:request:trailers', this.onTrailers);
  }

  /** Record the requests `f` makes (one at a time: concurrent callers would share the record). */
  async record<T>(
    f: () => Promise<T>,
  ): Promise<{ value: T; requests: TracedRequest[]; startMs: number; endMs: number }> {
    const requests: TracedRequest[] = [];
    this.recording = requests;
    const startMs = performance.now();
    try {
      const value = await f();
      return { value, requests, startMs, endMs: performance.now() };
    } finally {
      this.recording = undefined;
    }
  }

  close(): void {
    dc.unsubscribe('undici:request:create', this.onCreate);
    dc.unsubscribe('undici:request:headers', this.onHeaders);
    dc.unsubscribe('undici:request:trailers', this.onTrailers);
  }
}

/** Milliseconds of [start, end] covered by at least one of the intervals (the client waiting on the network). */
export function covered(intervals: ReadonlyArray<[number, number]>, start: number, end: number): number {
  const xs = intervals
    .map(([a, b]) => [Math.max(a, start), Math.min(b, end)] as const)
    .filter(([a, b]) => b > a)
    .sort((p, q) => p[0] - q[0]);
  let total = 0;
  let curA = -Infinity;
  let curB = -Infinity;
  for (const [a, b] of xs) {
    if (a > curB) {
      if (curB > curA) total += curB - curA;
      curA = a;
      curB = b;
    } else curB = Math.max(curB, b);
  }
  if (curB > curA) total += curB - curA;
  return total;
}
