/**
 * Wire format of the guest agent (docs/agent-protocol.md), host side. One byte stream carries frames:
 *
 *   u32 BE length L (= 5 + payload length) | u8 type | u32 BE id | payload
 *
 * Anything coming from the guest is hostile input: frames over MAX_PAYLOAD are a protocol error and
 * end the connection; they are never buffered.
 */
import { SandboxError } from '../errors.js';

export const PROTOCOL_VERSION = 1;
export const HOST_MAGIC = 'SBXHOST1\n';
export const AGENT_MAGIC = 'SBXAGENT1\n';
export const HEADER_LEN = 9;
/** Largest payload of one frame, both directions. */
export const MAX_PAYLOAD = 1 << 20;
/** Largest JSON request the agent accepts. */
export const MAX_JSON = 64 << 10;

export const FrameType = {
  Req: 1,
  Res: 2,
  Evt: 3,
  Out: 4,
  Err: 5,
  In: 6,
  /** host -> guest: opens a session without JSON: u64 BE wall clock (ns) + seed bytes; answered by Res. */
  Hello: 7,
  /** host -> guest: opens an exec without JSON (encodeExecPayload); agents with feature `exec.bin`. */
  Exec: 8,
  /**
   * both ways: u32 BE bytes of flow-control credit for stream `id` (docs/agent-protocol.md, "Flow control"); from
   * the host with id 0 and no payload it turns flow control on. Agents with feature `flow`.
   */
  Window: 9,
} as const;
export type FrameType = (typeof FrameType)[keyof typeof FrameType];

export interface Frame {
  type: number;
  id: number;
  payload: Buffer;
}

export function encodeFrame(type: FrameType, id: number, payload: Buffer): Buffer {
  if (payload.length > MAX_PAYLOAD) {
    throw new SandboxError(
      'agent.frame-too-large',
      `frame payload of ${payload.length} bytes is over the ${MAX_PAYLOAD}-byte limit`,
      {
        hint: 'split the data into chunks of at most 1 MiB',
      },
    );
  }
  const b = Buffer.allocUnsafe(HEADER_LEN + payload.length);
  b.writeUInt32BE(5 + payload.length, 0);
  b.writeUInt8(type, 4);
  b.writeUInt32BE(id >>> 0, 5);
  payload.copy(b, HEADER_LEN);
  return b;
}

/** The arguments of an exec request (the `exec` op's, and the EXEC frame's). */
export interface ExecRequestArgs {
  argv: readonly string[];
  env?: Record<string, string>;
  cwd?: string;
  /** Keep stdin open for `write()`; otherwise the process reads /dev/null. */
  stdin?: boolean;
  /** Run under a pseudo-terminal of this size (stdout and stderr are merged). */
  pty?: { cols: number; rows: number };
  /** The agent kills the process group (SIGKILL) after this long. */
  timeoutMs?: number;
  uid?: number;
  gid?: number;
}

const fitsU32 = (n: number) => Number.isInteger(n) && n >= 0 && n <= 0xffff_ffff;
const fitsU16 = (n: number) => Number.isInteger(n) && n >= 0 && n <= 0xffff;

/**
 * The EXEC frame's payload (docs/agent-protocol.md): the guest starts a command without running its JSON decoder,
 * which under TCG is cold code in every fresh clone. undefined when a value does not fit the binary layout (a
 * fractional timeout, a negative uid, ...): the caller then sends the JSON `exec` op, which reports such values.
 */
export function encodeExecPayload(a: ExecRequestArgs): Buffer | undefined {
  const env = Object.entries(a.env ?? {}).map(([k, v]) => `${k}=${v}`);
  const timeoutMs = a.timeoutMs ?? 0;
  const cols = a.pty?.cols ?? 0;
  const rows = a.pty?.rows ?? 0;
  if (![timeoutMs, a.uid ?? 0, a.gid ?? 0].every(fitsU32) || !fitsU16(cols) || !fitsU16(rows)) return undefined;
  if (!fitsU16(a.argv.length) || !fitsU16(env.length)) return undefined;
  const strs = [a.cwd ?? '', ...a.argv, ...env].map((x) => Buffer.from(x));
  const size = 17 + 4 + strs.reduce((n, b) => n + 4 + b.length, 0);
  const b = Buffer.allocUnsafe(size);
  let o = b.writeUInt8(
    (a.stdin ? 1 : 0) | (a.pty ? 2 : 0) | (a.uid !== undefined ? 4 : 0) | (a.gid !== undefined ? 8 : 0),
    0,
  );
  o = b.writeUInt32BE(timeoutMs, o);
  o = b.writeUInt32BE(a.uid ?? 0, o);
  o = b.writeUInt32BE(a.gid ?? 0, o);
  o = b.writeUInt16BE(cols, o);
  o = b.writeUInt16BE(rows, o);
  const put = (x: Buffer) => {
    o = b.writeUInt32BE(x.length, o);
    o += x.copy(b, o);
  };
  put(strs[0]!);
  o = b.writeUInt16BE(a.argv.length, o);
  for (const x of strs.slice(1, 1 + a.argv.length)) put(x);
  o = b.writeUInt16BE(env.length, o);
  for (const x of strs.slice(1 + a.argv.length)) put(x);
  return b;
}

/**
 * Incremental decoder. `push` returns the complete frames; it throws agent.frame-too-large on a frame over the
 * limit (as soon as its header arrives) and agent.protocol on a malformed header. The chunks of a frame whose header
 * has arrived are joined once, when the frame is complete: a guest trickling a 1 MiB frame a byte at a time would
 * otherwise make every byte copy everything before it (quadratic, minutes of the host's event loop).
 */
export class FrameDecoder {
  private buf: Buffer = Buffer.alloc(0);
  /** Chunks after `buf` not joined yet, while a frame of `need` bytes (header included) is incomplete. */
  private pending: Buffer[] = [];
  private pendingLen = 0;
  private need = 0;
  private synced: boolean;

  constructor(opts: { expectMagic?: string; maxPayload?: number } = {}) {
    this.magic = opts.expectMagic;
    this.synced = opts.expectMagic === undefined;
    this.maxPayload = opts.maxPayload ?? MAX_PAYLOAD;
  }

  private readonly magic: string | undefined;
  private readonly maxPayload: number;

  get isSynced(): boolean {
    return this.synced;
  }

  push(chunk: Buffer): Frame[] {
    if (this.need > 0) {
      this.pending.push(chunk);
      this.pendingLen += chunk.length;
      if (this.buf.length + this.pendingLen < this.need) return [];
      this.buf = Buffer.concat([this.buf, ...this.pending]);
      this.pending = [];
      this.pendingLen = 0;
      this.need = 0;
    } else this.buf = this.buf.length === 0 ? chunk : Buffer.concat([this.buf, chunk]);
    if (!this.synced && this.magic !== undefined) {
      // Bytes before the agent's magic are stale output of an earlier session; drop them.
      const at = this.buf.indexOf(this.magic);
      if (at < 0) {
        if (this.buf.length > this.magic.length) this.buf = this.buf.subarray(this.buf.length - this.magic.length);
        return [];
      }
      this.buf = this.buf.subarray(at + this.magic.length);
      this.synced = true;
    }
    const frames: Frame[] = [];
    while (this.buf.length >= 4) {
      const len = this.buf.readUInt32BE(0);
      if (len < 5) throw new SandboxError('agent.protocol', `malformed frame: length ${len} below header size`);
      if (len - 5 > this.maxPayload) {
        throw new SandboxError(
          'agent.frame-too-large',
          `agent sent a frame of ${len - 5} bytes, over the ${this.maxPayload}-byte limit`,
          {
            hint: 'the guest agent is misbehaving or not ours; destroy the VM',
          },
        );
      }
      if (this.buf.length < 4 + len) {
        this.need = 4 + len;
        break;
      }
      frames.push({
        type: this.buf.readUInt8(4),
        id: this.buf.readUInt32BE(5),
        payload: Buffer.from(this.buf.subarray(HEADER_LEN, 4 + len)),
      });
      this.buf = this.buf.subarray(4 + len);
    }
    return frames;
  }
}
