/**
 * A hostile guest agent for the host side of the agent protocol (docs/agent-protocol.md): a unix socket that
 * AgentClient.connect dials as it dials a VM's, speaking the real wire format (magic, frames, HELLO, WINDOW), whose
 * answers each test scripts: frames of any type, id, shape and size, no `flow`, floods, lies about sizes. It also
 * records what the host sent (WINDOW grants per stream, requests), so a test can tell whether the host held credit.
 *
 * And the watch on the host process every hostile test needs: uncaught exceptions and unhandled rejections are
 * collected (a daemon would have died of them) instead of ending the test run, and asserted empty.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  AGENT_MAGIC,
  encodeFrame,
  FrameDecoder,
  FrameType,
  HOST_MAGIC,
  MAX_PAYLOAD,
  PROTOCOL_VERSION,
  type Frame,
} from '../../src/guest/index.js';

/** A request the host sent (REQ's JSON, or the EXEC frame's presence). */
export interface GuestRequest {
  id: number;
  op: string;
  args: Record<string, unknown>;
}

/** What a script can do on the session a request arrived on. */
export interface GuestSession {
  readonly socket: Socket;
  /** Send one well-formed frame (any type, id and payload up to MAX_PAYLOAD). */
  frame(type: number, id: number, payload: Buffer | string): boolean;
  /** Send JSON as a frame. */
  json(type: number, id: number, value: unknown): boolean;
  /** Send raw bytes (a broken header, a lie about a length). */
  raw(b: Buffer): boolean;
  /** Answer `id` with `{ok: true, ...result}`. */
  ok(id: number, result?: Record<string, unknown>): void;
  /** WINDOW credit the host granted per stream id. */
  readonly granted: Map<number, number>;
  /** Whether the host turned flow control on (WINDOW id 0). */
  readonly flowOn: boolean;
  /** Called on every WINDOW grant the host sends (a guest that sends as much as its credit allows). */
  onGrant?: (id: number, n: number) => void;
}

export type Script = (req: GuestRequest, s: GuestSession) => void | Promise<void>;

export interface FakeGuestOptions {
  /** Features the hello answer lists. @default ['exec', 'files', 'watch', 'tcp', 'flow'] */
  features?: string[];
  /** Replace the hello answer's payload entirely (a hostile handshake). */
  hello?: (id: number, s: GuestSession) => void;
  /** Every request after the hello; default: ping, time.set, sync, cancel, signal answer `{ok: true}`. */
  script?: Script;
}

/** Requests every well-behaved agent answers with `{ok: true}` and nothing else. */
const TRIVIAL = new Set(['ping', 'time.set', 'sync', 'cancel', 'signal', 'resize', 'file.remove', 'file.mkdir']);

export class FakeGuest {
  readonly path: string;
  private readonly dir: string;
  private readonly server: Server;
  readonly sessions: GuestSession[] = [];
  readonly requests: GuestRequest[] = [];

  private constructor(private readonly opts: FakeGuestOptions) {
    this.dir = mkdtempSync(join(tmpdir(), 'sbx-hostile-'));
    this.path = join(this.dir, 'agent.sock');
    this.server = createServer((sock) => this.serve(sock));
  }

  static async start(opts: FakeGuestOptions = {}): Promise<FakeGuest> {
    const g = new FakeGuest(opts);
    await new Promise<void>((resolve) => g.server.listen(g.path, resolve));
    return g;
  }

  async close(): Promise<void> {
    for (const s of this.sessions) s.socket.destroy();
    await new Promise((r) => this.server.close(r));
    rmSync(this.dir, { recursive: true, force: true });
  }

  private serve(socket: Socket): void {
    const granted = new Map<number, number>();
    let flowOn = false;
    const session: GuestSession = {
      socket,
      granted,
      get flowOn() {
        return flowOn;
      },
      frame: (type, id, payload) => {
        const b = typeof payload === 'string' ? Buffer.from(payload) : payload;
        if (socket.destroyed) return false;
        if (b.length > MAX_PAYLOAD) throw new Error('use raw() for a frame over the limit');
        return socket.write(encodeFrame(type as FrameType, id, b));
      },
      json: (type, id, value) => session.frame(type, id, JSON.stringify(value) ?? 'undefined'),
      raw: (b) => !socket.destroyed && socket.write(b),
      ok: (id, result = {}) => void session.json(FrameType.Res, id, { ok: true, ...result }),
    };
    this.sessions.push(session);
    socket.on('error', () => undefined);
    const dec = new FrameDecoder({ expectMagic: HOST_MAGIC });
    socket.write(AGENT_MAGIC);
    socket.on('data', (chunk: Buffer) => {
      let frames: Frame[];
      try {
        frames = dec.push(chunk);
      } catch {
        socket.destroy();
        return;
      }
      for (const f of frames) this.onFrame(f, session, (on) => (flowOn = on));
    });
  }

  private onFrame(f: Frame, s: GuestSession, setFlow: (on: boolean) => void): void {
    if (f.type === FrameType.Hello) {
      if (this.opts.hello) this.opts.hello(f.id, s);
      else
        s.ok(f.id, {
          protocol: PROTOCOL_VERSION,
          version: 'fake-hostile',
          pid: 1,
          features: this.opts.features ?? ['exec', 'files', 'watch', 'tcp', 'flow'],
        });
      return;
    }
    if (f.type === FrameType.Window) {
      if (f.id === 0) setFlow(true);
      else if (f.payload.length === 4) {
        const n = f.payload.readUInt32BE(0);
        s.granted.set(f.id, (s.granted.get(f.id) ?? 0) + n);
        s.onGrant?.(f.id, n);
      }
      return;
    }
    if (f.type !== FrameType.Req) return; // IN data: a fake guest has nowhere to put it
    let body: Record<string, unknown>;
    try {
      body = JSON.parse(f.payload.toString()) as Record<string, unknown>;
    } catch {
      return;
    }
    const { op, ...args } = body;
    const req: GuestRequest = { id: f.id, op: String(op), args };
    this.requests.push(req);
    if (this.opts.script) {
      void Promise.resolve(this.opts.script(req, s)).catch(() => s.socket.destroy());
      return;
    }
    if (TRIVIAL.has(req.op)) s.ok(f.id);
  }
}

/** A frame header claiming `len - 5` payload bytes (a lie about the size when fewer follow). */
export function frameHeader(type: number, id: number, payloadLength: number): Buffer {
  const h = Buffer.alloc(9);
  h.writeUInt32BE((5 + payloadLength) >>> 0, 0);
  h.writeUInt8(type & 0xff, 4);
  h.writeUInt32BE(id >>> 0, 5);
  return h;
}

/**
 * Collect what would have ended a daemon (uncaught exceptions, unhandled rejections) while `fn` runs and for a few
 * event-loop turns after, and return them. Node's test runner would otherwise report them against a random test.
 */
export async function crashesDuring(fn: () => Promise<void>, settleMs = 50): Promise<unknown[]> {
  const seen: unknown[] = [];
  const onErr = (e: unknown) => seen.push(e);
  process.on('uncaughtException', onErr);
  process.on('unhandledRejection', onErr);
  try {
    await fn();
    await new Promise((r) => setTimeout(r, settleMs));
  } finally {
    process.off('uncaughtException', onErr);
    process.off('unhandledRejection', onErr);
  }
  return seen;
}

/** Seeded and bounded; SBX_HOSTILE_LONG=1 runs many more cases (bench/). */
export const LONG = process.env.SBX_HOSTILE_LONG === '1';
export const SEED = Number(process.env.SBX_HOSTILE_SEED ?? 28_2026);
