/**
 * The server side of SPDY/3.1 as Kubernetes uses it for port-forward (github.com/moby/spdystream): the client
 * opens streams with SYN_STREAM (headers zlib-compressed with the SPDY/3 dictionary, one compression context per
 * direction for the whole connection), the server answers SYN_REPLY, data flows in DATA frames, FIN half-closes,
 * RST_STREAM aborts, PING is echoed. spdystream does no flow control, so WINDOW_UPDATE and SETTINGS are ignored.
 *
 * Backpressure without SPDY flow control: a stream's write completes once the transport has taken its frames, and
 * while a stream's reader is full the transport is not read at all (what the kubelet's spdystream does too: its
 * frame reader waits on the full stream).
 *
 * Transport-agnostic: bytes come in through `push()` and go out through the `write` callback, so the same code
 * serves a raw upgraded socket (`Upgrade: SPDY/3.1`) and SPDY tunnelled in WebSocket messages
 * (`SPDY/3.1+portforward.k8s.io`, what kubectl 1.36 sends first).
 */
import { EventEmitter } from 'node:events';
import { Duplex } from 'node:stream';
import { constants as zc, createDeflate, createInflate, type Deflate, type Inflate } from 'node:zlib';
import { SPDY3_DICTIONARY } from './spdy-dictionary.js';

const VERSION = 3;
const FLAG_FIN = 0x01;
const MAX_FRAME_DATA = 64 << 10;
/** A header block or control frame larger than this is a protocol error (spdystream's defaults are similar). */
const MAX_CONTROL_FRAME = 1 << 20;
/**
 * A header block that inflates to more than this is refused and ends the connection. Port-forward's headers
 * (`streamtype`, `port`, `requestid`) are a few dozen bytes; this leaves room for anything a client adds.
 */
const MAX_HEADER_BLOCK = 64 << 10;

const enum FrameType {
  SynStream = 1,
  SynReply = 2,
  RstStream = 3,
  Settings = 4,
  Ping = 6,
  GoAway = 7,
  Headers = 8,
  WindowUpdate = 9,
}

export const RstStatus = { protocolError: 1, invalidStream: 2, refusedStream: 3, cancel: 5, internalError: 6 } as const;

/** Where the connection's bytes go, and how reading from the peer is held back. */
export interface SpdyTransport {
  /** Write to the peer; `done` once the transport has taken the bytes (a stream's write completes then). */
  write(b: Buffer, done: () => void): void;
  /** Stop reading from the peer while a stream's reader is full; `resume` once none is. */
  pause(): void;
  resume(): void;
}

/**
 * Run zlib stream operations one at a time and collect what each flush produces. With `maxOutput`, an operation
 * that would produce more is refused as soon as it does, and the stream is destroyed: a peer's compressed header
 * block (up to MAX_CONTROL_FRAME) could otherwise inflate to a thousand times its size.
 */
class ZlibPipe {
  private chain: Promise<unknown> = Promise.resolve();
  private chunks: Buffer[] = [];
  private size = 0;
  private refuse: ((err: Error) => void) | undefined;

  constructor(
    private readonly z: Inflate | Deflate,
    private readonly maxOutput = Number.POSITIVE_INFINITY,
  ) {
    z.on('data', (b: Buffer) => {
      this.size += b.length;
      if (this.size <= this.maxOutput) {
        this.chunks.push(b);
        return;
      }
      this.chunks = [];
      this.z.destroy();
      this.refuse?.(new Error(`SPDY header block inflates to more than ${this.maxOutput} bytes`));
    });
    z.on('error', () => undefined);
  }

  run(input: Buffer): Promise<Buffer> {
    const p = this.chain.then(
      () =>
        new Promise<Buffer>((resolve, reject) => {
          if (this.z.destroyed) return reject(new Error('SPDY compression context is gone'));
          const onError = (err: Error) => reject(err);
          this.refuse = reject;
          this.size = 0;
          this.z.once('error', onError);
          this.z.write(input);
          this.z.flush(zc.Z_SYNC_FLUSH, () => {
            this.z.off('error', onError);
            this.refuse = undefined;
            // 'data' events for the flushed output are emitted before the flush callback.
            const out = Buffer.concat(this.chunks);
            this.chunks = [];
            resolve(out);
          });
        }),
    );
    this.chain = p.catch(() => undefined);
    return p;
  }

  close(): void {
    this.z.destroy();
  }
}

export class SpdyStream extends Duplex {
  private replied = false;
  remoteClosed = false;

  constructor(
    private readonly conn: SpdyServerConnection,
    readonly id: number,
    readonly headers: Readonly<Record<string, string>>,
  ) {
    super({ allowHalfOpen: true });
  }

  /** Accept the stream (SYN_REPLY with no headers). */
  reply(): void {
    if (this.replied) return;
    this.replied = true;
    this.conn.sendHeaders(FrameType.SynReply, this.id, {}, 0);
  }

  /** Abort the stream (RST_STREAM). */
  reset(status: number = RstStatus.cancel): void {
    this.conn.sendRst(this.id, status);
    this.conn.forget(this.id);
    this.destroy();
  }

  override _read(): void {
    this.conn.drained(this);
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    if (chunk.length === 0) return cb();
    for (let off = 0; off < chunk.length; off += MAX_FRAME_DATA) {
      const last = off + MAX_FRAME_DATA >= chunk.length;
      this.conn.sendData(this.id, chunk.subarray(off, off + MAX_FRAME_DATA), 0, last ? () => cb() : undefined);
    }
  }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    this.conn.drained(this);
    cb(err);
  }

  override _final(cb: (err?: Error | null) => void): void {
    this.conn.sendData(this.id, Buffer.alloc(0), FLAG_FIN);
    if (this.remoteClosed) this.conn.forget(this.id);
    cb();
  }
}

export class SpdyServerConnection extends EventEmitter {
  private buf: Buffer = Buffer.alloc(0);
  private readonly streams = new Map<number, SpdyStream>();
  private readonly inflate = new ZlibPipe(createInflate({ dictionary: SPDY3_DICTIONARY }), MAX_HEADER_BLOCK);
  private readonly deflate = new ZlibPipe(createDeflate({ dictionary: SPDY3_DICTIONARY, level: 9 }));
  /** Incoming frames are handled in order (header blocks share one inflate context). */
  private inChain: Promise<void> = Promise.resolve();
  /** Outgoing frames leave in order (header blocks wait for the deflater). */
  private outChain: Promise<void> = Promise.resolve();
  private closed = false;
  private lastStreamId = 0;
  private readonly transport: SpdyTransport;
  /** Streams whose reader is full; the transport is paused while there is one. */
  private readonly full = new Set<SpdyStream>();

  /** A bare write function is a transport that takes every write at once and is never paused. */
  constructor(transport: SpdyTransport | ((b: Buffer) => void)) {
    super();
    this.transport =
      typeof transport === 'function'
        ? {
            write: (b, done) => {
              transport(b);
              done();
            },
            pause: () => undefined,
            resume: () => undefined,
          }
        : transport;
  }

  /** Feed bytes received from the peer. */
  push(chunk: Buffer): void {
    if (this.closed) return;
    this.buf = this.buf.length ? Buffer.concat([this.buf, chunk]) : chunk;
    while (this.buf.length >= 8) {
      const length = this.buf.readUInt32BE(4) & 0xffffff;
      const control = (this.buf[0]! & 0x80) !== 0;
      if (control && length > MAX_CONTROL_FRAME) return this.fail(new Error(`SPDY control frame of ${length} bytes`));
      if (this.buf.length < 8 + length) return;
      const frame = this.buf.subarray(0, 8 + length);
      this.buf = this.buf.subarray(8 + length);
      this.inChain = this.inChain.then(() => this.onFrame(frame)).catch((err: unknown) => this.fail(err as Error));
    }
  }

  /** The transport is gone: every stream ends. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const s of this.streams.values()) s.destroy();
    this.streams.clear();
    this.full.clear();
    this.inflate.close();
    this.deflate.close();
    this.emit('close');
  }

  private fail(err: Error): void {
    this.emit('error', err);
    this.close();
  }

  private async onFrame(frame: Buffer): Promise<void> {
    if (this.closed) return;
    const flags = frame[4]!;
    const body = frame.subarray(8);
    if ((frame[0]! & 0x80) === 0) {
      const id = frame.readUInt32BE(0) & 0x7fffffff;
      const s = this.streams.get(id);
      if (!s) return; // data for a stream we reset or never knew
      if (body.length && !s.push(Buffer.from(body))) this.filled(s);
      if (flags & FLAG_FIN) {
        s.remoteClosed = true;
        s.push(null);
        if (s.writableFinished) this.forget(id);
      }
      return;
    }
    const version = frame.readUInt16BE(0) & 0x7fff;
    const type = frame.readUInt16BE(2);
    if (version !== VERSION) throw new Error(`unsupported SPDY version ${version}`);
    switch (type) {
      case FrameType.SynStream: {
        const id = body.readUInt32BE(0) & 0x7fffffff;
        const headers = parseHeaderBlock(await this.inflate.run(body.subarray(10)));
        if (id <= this.lastStreamId || this.streams.has(id)) {
          this.sendRst(id, RstStatus.protocolError);
          return;
        }
        this.lastStreamId = id;
        const s = new SpdyStream(this, id, headers);
        this.streams.set(id, s);
        if (flags & FLAG_FIN) {
          s.remoteClosed = true;
          s.push(null);
        }
        this.emit('stream', s);
        return;
      }
      case FrameType.Headers:
      case FrameType.SynReply:
        // Keep the inflate context in step even though we do not use these headers.
        await this.inflate.run(body.subarray(4));
        return;
      case FrameType.RstStream: {
        const id = body.readUInt32BE(0) & 0x7fffffff;
        const s = this.streams.get(id);
        this.streams.delete(id);
        s?.destroy();
        return;
      }
      case FrameType.Ping:
        this.enqueue(async () => Buffer.from(frame));
        return;
      case FrameType.GoAway:
        this.close();
        return;
      default:
        return; // SETTINGS, WINDOW_UPDATE, NOOP, CREDENTIAL: nothing to do
    }
  }

  /** @internal */
  forget(id: number): void {
    this.streams.delete(id);
  }

  private filled(s: SpdyStream): void {
    if (this.full.size === 0) this.transport.pause();
    this.full.add(s);
  }

  /** @internal The stream's reader wants more (or the stream is gone). */
  drained(s: SpdyStream): void {
    if (!this.full.delete(s) || this.full.size > 0 || this.closed) return;
    this.transport.resume();
  }

  /** @internal `done` once the transport has taken the frame (or the connection is gone). */
  sendData(id: number, data: Buffer, flags: number, done?: () => void): void {
    const h = Buffer.alloc(8);
    h.writeUInt32BE(id & 0x7fffffff, 0);
    h.writeUInt32BE(((flags & 0xff) << 24) | data.length, 4);
    const frame = Buffer.concat([h, data]);
    this.enqueue(async () => frame, done);
  }

  /** @internal */
  sendRst(id: number, status: number): void {
    const f = controlFrame(FrameType.RstStream, 0, 8);
    f.writeUInt32BE(id & 0x7fffffff, 8);
    f.writeUInt32BE(status, 12);
    this.enqueue(async () => f);
  }

  /** @internal SYN_REPLY or HEADERS with a compressed header block. */
  sendHeaders(
    type: FrameType.SynReply | FrameType.Headers,
    id: number,
    headers: Record<string, string>,
    flags: number,
  ): void {
    this.enqueue(async () => {
      const block = await this.deflate.run(encodeHeaderBlock(headers));
      const f = controlFrame(type, flags, 4 + block.length);
      f.writeUInt32BE(id & 0x7fffffff, 8);
      block.copy(f, 12);
      return f;
    });
  }

  private enqueue(make: () => Promise<Buffer>, done: () => void = () => undefined): void {
    if (this.closed) return done();
    const p = this.outChain.then(make);
    this.outChain = p.then(
      (b) => {
        if (this.closed) done();
        else this.transport.write(b, done);
      },
      (err: unknown) => {
        this.fail(err as Error);
        done();
      },
    );
  }
}

function controlFrame(type: FrameType, flags: number, length: number): Buffer {
  const f = Buffer.alloc(8 + length);
  f.writeUInt16BE(0x8000 | VERSION, 0);
  f.writeUInt16BE(type, 2);
  f.writeUInt32BE(((flags & 0xff) << 24) | length, 4);
  return f;
}

/** Name/value block: uint32 count, then (uint32 length, bytes) for each name and value; names lower-case. */
export function parseHeaderBlock(b: Buffer): Record<string, string> {
  const out: Record<string, string> = {};
  let off = 0;
  const take = (): string => {
    if (off + 4 > b.length) throw new Error('truncated SPDY header block');
    const n = b.readUInt32BE(off);
    off += 4;
    if (off + n > b.length) throw new Error('truncated SPDY header block');
    const s = b.subarray(off, off + n).toString('utf8');
    off += n;
    return s;
  };
  if (b.length < 4) throw new Error('truncated SPDY header block');
  const count = b.readUInt32BE(0);
  off = 4;
  if (count > 1000) throw new Error(`SPDY header block with ${count} headers`);
  for (let i = 0; i < count; i++) {
    const name = take().toLowerCase();
    out[name] = take().split('\0').join(',');
  }
  return out;
}

export function encodeHeaderBlock(headers: Record<string, string>): Buffer {
  const parts: Buffer[] = [];
  const u32 = (n: number) => {
    const b = Buffer.alloc(4);
    b.writeUInt32BE(n, 0);
    return b;
  };
  const entries = Object.entries(headers);
  parts.push(u32(entries.length));
  for (const [k, v] of entries) {
    const kb = Buffer.from(k.toLowerCase());
    const vb = Buffer.from(v);
    parts.push(u32(kb.length), kb, u32(vb.length), vb);
  }
  return Buffer.concat(parts);
}
