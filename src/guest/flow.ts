/**
 * Host side of per-stream flow control (docs/agent-protocol.md, "Flow control"; the host refuses an agent without
 * it). Each stream may carry STREAM_WINDOW bytes of data per direction before the receiver grants more with a
 * WINDOW frame: the host sends a stream's IN data only within the credit the agent granted and while the socket
 * takes it (StreamInput), and grants credit for OUT/ERR data only once its consumer has taken it (StreamOutput).
 * So one stalled stream, on either side, holds back only itself, and neither side buffers more than a window of
 * it. A guest that sends past its credit, or grants more than was sent, is lying: the caller ends the connection.
 */
import { MAX_PAYLOAD } from './protocol.js';

/** Each stream's credit per direction when flow control is on (the agent's `initialWindow`). */
export const STREAM_WINDOW = 256 << 10;
/** Consumed output is granted back in batches of this much (one WINDOW frame per quarter window). */
const GRANT_BATCH = STREAM_WINDOW / 4;

/** What a stream needs from the connection: send one data frame, grant credit, wait for the socket to drain. */
export interface StreamLink {
  /** Send an IN frame now; false if the socket's buffer is full. Throws if the connection is closed. */
  sendIn(payload: Buffer): boolean;
  /** Send a WINDOW frame granting `n` bytes (no-op once the stream or connection is gone). */
  sendWindow(n: number): void;
  /** Resolves when the socket has drained (or closed). */
  socketDrained(): Promise<void>;
}

/**
 * Host -> guest data of one stream (stdin, file content, TCP data): sent within the stream's credit, and only while
 * the socket takes it (a guest that grants credit but never reads must not pile data up in the socket's buffer).
 */
export class StreamInput {
  private credit = STREAM_WINDOW;
  private readonly queue: Buffer[] = [];
  private queued = 0;
  private eofPending = false;
  private closed = false;
  private socketFull = false;
  private waiters: (() => void)[] = [];

  constructor(private readonly link: StreamLink) {}

  /** Bytes accepted but not yet sent (waiting for credit). */
  get pending(): number {
    return this.queued;
  }

  /** Queue `data`; true if it was all sent (nothing waits for credit or for the socket). */
  write(data: Buffer): boolean {
    if (this.closed || data.length === 0) return true;
    this.queue.push(data);
    this.queued += data.length;
    this.pump();
    return this.queued === 0 && !this.socketFull;
  }

  /** End of input (an empty IN frame), after everything queued. */
  end(): void {
    if (this.closed) return;
    this.eofPending = true;
    this.pump();
  }

  /** Resolves once everything written so far has been sent (or the stream is over). */
  drained(): Promise<void> {
    if (this.closed || (this.queued === 0 && !this.socketFull)) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  /** A WINDOW frame from the agent; what is wrong with it when it grants more than was sent. */
  grant(n: number): string | undefined {
    if (this.closed) return undefined;
    if (this.credit + n > STREAM_WINDOW)
      return `agent granted ${n} bytes of credit, past the ${STREAM_WINDOW}-byte window (it holds ${STREAM_WINDOW - this.credit})`;
    this.credit += n;
    this.pump();
    return undefined;
  }

  /** The stream is over (answered, failed, cancelled): drop what is queued. */
  close(): void {
    this.closed = true;
    this.queue.length = 0;
    this.queued = 0;
    this.wake();
  }

  private pump(): void {
    while (this.queue.length && this.credit > 0 && !this.socketFull) {
      const head = this.queue[0]!;
      const n = Math.min(head.length, this.credit, MAX_PAYLOAD);
      const full = !this.link.sendIn(head.subarray(0, n));
      this.credit -= n;
      this.queued -= n;
      if (n === head.length) this.queue.shift();
      else this.queue[0] = head.subarray(n);
      if (full) this.waitSocket();
    }
    if (this.eofPending && this.queue.length === 0) {
      this.eofPending = false;
      this.link.sendIn(Buffer.alloc(0));
    }
    if (this.queued === 0 && !this.socketFull) this.wake();
  }

  /** The socket's buffer is full: send more once it drained. */
  private waitSocket(): void {
    if (this.socketFull) return;
    this.socketFull = true;
    void this.link.socketDrained().then(() => {
      this.socketFull = false;
      if (this.closed) return;
      try {
        this.pump();
      } catch {
        this.close(); // the connection is gone; its operation fails on its own
      }
    });
  }

  private wake(): void {
    for (const w of this.waiters.splice(0)) w();
  }
}

/**
 * Guest -> host data of one stream (OUT and ERR together). `received` counts what arrives, `consumed` what the
 * stream's consumer has taken; credit goes back to the agent in batches. A guest that sends past the window is
 * misbehaving: `received` says so, and the connection ends.
 */
export class StreamOutput {
  private outstanding = 0;
  private ungranted = 0;

  constructor(private readonly link: Pick<StreamLink, 'sendWindow'>) {}

  /** Count `n` bytes that arrived; what is wrong when they are past the stream's credit. */
  received(n: number): string | undefined {
    this.outstanding += n;
    if (this.outstanding > STREAM_WINDOW)
      return `agent sent ${this.outstanding} bytes on a stream past its ${STREAM_WINDOW}-byte window`;
    return undefined;
  }

  /** The consumer has taken `n` bytes; `done` is what its handler returned (a promise = not yet). */
  consumed(n: number, done: unknown): void {
    if (done instanceof Promise) {
      done.then(
        () => this.grant(n),
        () => this.grant(n),
      );
    } else this.grant(n);
  }

  private grant(n: number): void {
    this.outstanding -= n;
    this.ungranted += n;
    if (this.ungranted < GRANT_BATCH) return;
    const g = this.ungranted;
    this.ungranted = 0;
    this.link.sendWindow(g);
  }
}
