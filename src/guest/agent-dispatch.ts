/**
 * Where a frame from the guest goes: the table of open operations and the routing of each guest frame to its
 * operation, checked on the way. Split out of agent-client.ts because it is a separate idea from the client's
 * operations API (connect, start, request, exec, ...): this half only decides whether a frame the (hostile) guest
 * sent is well-formed and whose it is, and hands the verdict back to the connection (protocolError / abandon), which
 * owns the socket and its lifetime.
 */
import { FrameType, type Frame } from './protocol.js';
import { agentError } from './agent-errors.js';
import { check, EvtFrame, problem, ResFrame, type Check } from './agent-schemas.js';
import type { StreamInput, StreamOutput } from './flow.js';

/** One open operation of a connection: how its answer, events and output are delivered. */
export interface Pending {
  op?: string;
  resolve: (res: Record<string, unknown>) => void;
  reject: (err: Error) => void;
  onEvent?: (evt: Record<string, unknown>) => void;
  /** Output handlers; a returned promise holds the stream's credit until it settles (backpressure). */
  onOut?: (b: Buffer) => unknown;
  onErr?: (b: Buffer) => unknown;
  /** The shape of the operation's result and events; a guest that answers otherwise broke the protocol. */
  result?: Check;
  event?: Check;
  timer?: NodeJS.Timeout;
  /** The stream's IN data (streamInput) and the accounting of its OUT/ERR data (flow control). */
  input?: StreamInput;
  output?: StreamOutput;
}

/** What the routing of a frame may do to the connection it came on. */
export interface FrameSink {
  readonly pending: Map<number, Pending>;
  /** The guest broke the protocol: the connection ends. */
  protocolError(message: string): void;
  /** Operation `id` is over on the host side (its handler threw). */
  abandon(id: number, p: Pending, err: unknown): void;
}

const RES = check(ResFrame);
/** The frame types a guest sends; any other is a protocol error. */
const GUEST_FRAME_TYPES = new Set<number>([
  FrameType.Res,
  FrameType.Evt,
  FrameType.Out,
  FrameType.Err,
  FrameType.Window,
]);
const EVT = check(EvtFrame);

/** A guest frame's JSON payload, or undefined when it is not JSON. */
function parseJson(payload: Buffer): unknown {
  try {
    return JSON.parse(payload.toString('utf8'));
  } catch {
    return undefined;
  }
}

/** Deliver one guest frame to its operation in `sink.pending`, or report why it cannot be. */
export function routeGuestFrame(sink: FrameSink, f: Frame): void {
  const p = sink.pending.get(f.id);
  if (!p) {
    // Late frames of a cancelled/timed-out request; a type the guest never sends is wrong whatever its id.
    if (!GUEST_FRAME_TYPES.has(f.type)) sink.protocolError(`agent sent unexpected frame type ${f.type}`);
    return;
  }
  switch (f.type) {
    case FrameType.Res: {
      const res = parseJson(f.payload);
      let bad = problem(RES, res);
      if (bad === undefined && (res as { ok: boolean }).ok && p.result) bad = problem(p.result, res);
      if (bad !== undefined) {
        sink.protocolError(`agent answered ${p.op ?? 'a request'} with a malformed RES frame (${bad})`);
        return;
      }
      sink.pending.delete(f.id);
      if (p.timer) clearTimeout(p.timer);
      p.input?.close();
      const r = res as Record<string, unknown>;
      if (r.ok === true) {
        delete r.ok;
        p.resolve(r);
      } else p.reject(agentError(p.op ?? 'request', r));
      return;
    }
    case FrameType.Evt: {
      const evt = parseJson(f.payload);
      const bad = problem(EVT, evt) ?? problem(p.event ?? EVT, evt);
      if (bad !== undefined) {
        sink.protocolError(`agent sent ${p.op ?? 'a request'} a malformed EVT frame (${bad})`);
        return;
      }
      try {
        p.onEvent?.(evt as Record<string, unknown>);
      } catch (err) {
        sink.abandon(f.id, p, err);
      }
      return;
    }
    case FrameType.Out:
    case FrameType.Err: {
      if (p.output) {
        const over = p.output.received(f.payload.length);
        if (over) {
          sink.protocolError(over);
          return;
        }
      }
      let done: unknown;
      try {
        done = f.type === FrameType.Out ? p.onOut?.(f.payload) : p.onErr?.(f.payload);
      } catch (err) {
        p.output?.consumed(f.payload.length, undefined);
        sink.abandon(f.id, p, err);
        return;
      }
      p.output?.consumed(f.payload.length, done);
      return;
    }
    case FrameType.Window: {
      if (f.payload.length !== 4) {
        sink.protocolError(`agent sent a WINDOW frame of ${f.payload.length} bytes`);
        return;
      }
      const over = p.input?.grant(f.payload.readUInt32BE(0));
      if (over) sink.protocolError(over);
      return;
    }
    default:
      sink.protocolError(`agent sent unexpected frame type ${f.type}`);
  }
}
