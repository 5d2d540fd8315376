/**
 * Host side of the guest agent: one multiplexed connection (virtio-serial, exposed by QEMU as a unix
 * socket) carrying exec, files, watch, TCP and health. Everything the guest sends is treated as hostile:
 * frames are size-checked before they are buffered, output collection is capped, and every request has
 * a deadline so a guest that never answers gives a clear error in bounded time. Which operation a guest frame
 * belongs to, and whether it is well-formed, is decided in agent-dispatch.ts.
 */
import { randomBytes } from 'node:crypto';
import { connect as netConnect, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { SandboxError } from '../errors.js';
import { silentLogger, type Logger } from '../log/logger.js';
import {
  AGENT_MAGIC,
  encodeExecPayload,
  encodeFrame,
  FrameDecoder,
  FrameType,
  HOST_MAGIC,
  MAX_JSON,
  MAX_PAYLOAD,
  PROTOCOL_VERSION,
  type ExecRequestArgs,
  type Frame,
} from './protocol.js';
import { check, HealthResult, HelloResult } from './agent-schemas.js';
import { routeGuestFrame, type FrameSink, type Pending } from './agent-dispatch.js';
import { AgentFiles } from './agent-files.js';
import { startExecProcess, type ExecOptions, type ExecProcess, type ExecResult } from './agent-exec.js';
import { connectGuestTcp } from './agent-tcp.js';
import { StreamInput, StreamOutput, type StreamLink } from './flow.js';

export interface AgentInfo {
  protocol: number;
  version: string;
  pid: number;
  features: string[];
}

export interface AgentHealth {
  uptimeMs?: number;
  load1?: number;
  processes?: number;
  memTotalKiB?: number;
  memAvailableKiB?: number;
  memCachedKiB?: number;
  /** The guest's root filesystem (statfs of /). */
  diskTotalKiB?: number;
  diskFreeKiB?: number;
}

export interface AgentConnectOptions {
  /** Deadline for connecting and the hello handshake. @default 10000 */
  connectTimeoutMs?: number;
  /** Default deadline of unary requests (stat, mkdir, ping, ...). @default 30000 */
  requestTimeoutMs?: number;
  /** Largest frame payload accepted from the guest. @default 1 MiB */
  maxPayload?: number;
  signal?: AbortSignal;
  /** Where protocol errors of the guest are logged (the VM's logger). */
  logger?: Logger;
}

const HELLO = check(HelloResult);
const HEALTH = check(HealthResult);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A request's payload, checked against the agent's request limit. */
function requestPayload(op: string, payload: Buffer): Buffer {
  if (payload.length > MAX_JSON) {
    throw new SandboxError(
      'agent.frame-too-large',
      `${op} request is ${payload.length} bytes, over the ${MAX_JSON}-byte limit`,
      { hint: 'send large data as file content, not as arguments' },
    );
  }
  return payload;
}

/** One connection to a guest agent. */
export class AgentClient {
  readonly files: AgentFiles;
  info!: AgentInfo;
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private closedErr: SandboxError | undefined;
  private readonly decoder: FrameDecoder;
  private readonly requestTimeoutMs: number;
  private readonly closeListeners: ((err: SandboxError) => void)[] = [];
  private readonly log: Logger;
  /** How routeGuestFrame (agent-dispatch.ts) reaches this connection's operations and ends it. */
  private readonly frameSink: FrameSink = {
    pending: this.pending,
    protocolError: (message) => this.protocolError(message),
    abandon: (id, p, err) => this.abandon(id, p, err),
  };

  private constructor(
    private readonly socket: Socket,
    readonly socketPath: string,
    opts: AgentConnectOptions,
  ) {
    this.files = new AgentFiles(this);
    this.requestTimeoutMs = opts.requestTimeoutMs ?? 30_000;
    this.log = opts.logger ?? silentLogger;
    this.decoder = new FrameDecoder({ expectMagic: AGENT_MAGIC, maxPayload: opts.maxPayload ?? MAX_PAYLOAD });
    socket.on('data', (chunk: Buffer) => {
      let frames: Frame[];
      try {
        frames = this.decoder.push(chunk);
      } catch (err) {
        this.fail(err instanceof SandboxError ? err : new SandboxError('agent.protocol', String(err)));
        return;
      }
      for (const f of frames) {
        if (this.closedErr) return;
        // Nothing a guest sends may escape this listener: an exception here would end the whole process.
        try {
          routeGuestFrame(this.frameSink, f);
        } catch (err) {
          this.protocolError(`frame of type ${f.type} for ${f.id} failed on the host: ${(err as Error).message}`);
        }
      }
    });
    socket.on('error', (err) =>
      this.fail(new SandboxError('agent.disconnected', `agent connection error: ${err.message}`, { cause: err })),
    );
    socket.on('close', () =>
      this.fail(
        new SandboxError('agent.disconnected', 'agent connection closed', {
          hint: 'the VM stopped or the connection was closed',
        }),
      ),
    );
  }

  /** Connect to the agent socket (retrying while it does not exist yet) and complete the hello handshake. */
  static async connect(socketPath: string, opts: AgentConnectOptions = {}): Promise<AgentClient> {
    const started = Date.now();
    const socket = await AgentClient.dial(socketPath, opts);
    const left = Math.max(1, (opts.connectTimeoutMs ?? 10_000) - (Date.now() - started));
    return AgentClient.handshake(socket, socketPath, { ...opts, connectTimeoutMs: left });
  }

  /**
   * Open the agent socket, retrying while it does not exist yet, without saying anything on it. A VM that
   * is restored later finds its host already connected (no port-open event for the guest to handle).
   */
  static async dial(socketPath: string, opts: AgentConnectOptions = {}): Promise<Socket> {
    const deadline = Date.now() + (opts.connectTimeoutMs ?? 10_000);
    let lastErr: unknown;
    for (;;) {
      if (opts.signal?.aborted)
        throw new SandboxError('agent.aborted', 'agent connect aborted', { cause: opts.signal.reason });
      try {
        return await new Promise<Socket>((resolve, reject) => {
          const s = netConnect(socketPath);
          s.once('connect', () => {
            s.removeAllListeners('error');
            // Until handshake() takes the socket over, an error only means the VM went away; handshake reports it.
            s.on('error', () => undefined);
            resolve(s);
          });
          s.once('error', reject);
        });
      } catch (err) {
        lastErr = err;
        if (Date.now() > deadline) break;
        await sleep(2);
      }
    }
    throw new SandboxError(
      'agent.unreachable',
      `cannot connect to the agent socket ${socketPath}: ${String((lastErr as Error | undefined)?.message ?? lastErr)}`,
      {
        cause: lastErr,
        hint: 'the VM is not running or its QEMU exited; check the VM log',
      },
    );
  }

  /** Start a session on a socket from dial(): magic, hello, protocol check. */
  static async handshake(socket: Socket, socketPath: string, opts: AgentConnectOptions = {}): Promise<AgentClient> {
    const timeoutMs = opts.connectTimeoutMs ?? 10_000;
    if (socket.destroyed) {
      throw new SandboxError('agent.disconnected', `the agent socket ${socketPath} closed before the handshake`, {
        hint: 'the VM stopped; check the VM log',
      });
    }
    socket.setNoDelay(true);
    const client = new AgentClient(socket, socketPath, opts);
    socket.write(HOST_MAGIC);
    try {
      const res = await client.hello({ timeoutMs, signal: opts.signal });
      client.info = {
        protocol: res.protocol as number,
        version: res.version as string,
        pid: res.pid as number,
        features: (res.features as string[] | undefined) ?? [],
      };
    } catch (err) {
      client.close();
      if (err instanceof SandboxError && err.code === 'agent.timeout') {
        throw new SandboxError('agent.unresponsive', `the guest agent did not answer within ${timeoutMs} ms`, {
          cause: err,
          hint: 'the guest may be paused, still booting or hung; check the VM console log',
        });
      }
      throw err;
    }
    if (client.info.protocol !== PROTOCOL_VERSION) {
      client.close();
      throw new SandboxError(
        'agent.version',
        `agent speaks protocol ${client.info.protocol}, host speaks ${PROTOCOL_VERSION}`,
        { hint: 'rebuild the guest image' },
      );
    }
    if (!client.info.features.includes('flow')) {
      // Without flow control nothing but the socket holds a guest back, and the socket is shared by every stream:
      // one stream's unread output would sit in this process's memory without bound.
      client.close();
      throw new SandboxError(
        'agent.version',
        `the guest agent ${client.info.version} does not offer flow control (feature "flow"); this host needs it`,
        { hint: 'rebuild the guest image (an agent from before flow control, or not ours)' },
      );
    }
    // Before any other request, so every stream of the session is flow-controlled.
    socket.write(encodeFrame(FrameType.Window, 0, Buffer.alloc(0)));
    return client;
  }

  get closed(): boolean {
    return this.closedErr !== undefined;
  }

  onClose(fn: (err: SandboxError) => void): void {
    this.closeListeners.push(fn);
  }

  close(): void {
    this.fail(new SandboxError('agent.disconnected', 'agent connection closed by the host'));
    this.socket.destroy();
  }

  private fail(err: SandboxError): void {
    if (this.closedErr) return;
    this.closedErr = err;
    this.socket.destroy();
    for (const [, p] of this.pending) {
      if (p.timer) clearTimeout(p.timer);
      p.input?.close();
      p.reject(err);
    }
    this.pending.clear();
    for (const fn of this.closeListeners) {
      try {
        fn(err);
      } catch (e) {
        this.log.error({ err: e }, 'an agent close listener failed');
      }
    }
  }

  /**
   * The guest broke the protocol (a frame of the wrong shape, data past its credit, ...): this VM's connection ends
   * and every call on it fails; the rest of the process goes on.
   */
  private protocolError(message: string): void {
    const err = new SandboxError('agent.protocol', message, {
      hint: 'the guest agent is misbehaving or not ours; destroy the VM',
    });
    this.log.warn({ socket: this.socketPath, err: err.message }, 'guest agent protocol error; connection closed');
    this.fail(err);
  }

  /** Operation `id` is over on the host side (its handler failed): reject it and tell the guest to stop. */
  private abandon(id: number, p: Pending, err: unknown): void {
    if (this.pending.get(id) !== p) return;
    this.pending.delete(id);
    if (p.timer) clearTimeout(p.timer);
    p.input?.close();
    this.log.debug({ socket: this.socketPath, op: p.op, err }, 'agent operation abandoned: its handler failed');
    p.reject(err instanceof Error ? err : new SandboxError('agent.protocol', `${p.op ?? 'request'}: ${String(err)}`));
    if (!this.closedErr) this.start('cancel', { target: id }).done.catch(() => undefined);
  }

  /** @internal Throws the connection's error once it is closed. */
  assertOpen(): void {
    if (this.closedErr) throw this.closedErr;
  }

  /** @internal */
  sendRaw(type: FrameType, id: number, payload: Buffer): boolean {
    if (this.closedErr) throw this.closedErr;
    return this.socket.write(encodeFrame(type, id, payload));
  }

  /** Resolves when the socket has drained (or closed). */
  private socketDrained(): Promise<void> {
    return new Promise<void>((resolve) => {
      const done = () => {
        this.socket.off('drain', done);
        this.socket.off('close', done);
        resolve();
      };
      this.socket.on('drain', done);
      this.socket.on('close', done);
    });
  }

  /** What the flow-control objects of stream `id` send through. */
  private link(id: number): StreamLink {
    return {
      sendIn: (payload) => this.sendRaw(FrameType.In, id, payload),
      sendWindow: (n) => {
        if (this.closedErr || !this.pending.has(id)) return;
        const b = Buffer.allocUnsafe(4);
        b.writeUInt32BE(n, 0);
        this.socket.write(encodeFrame(FrameType.Window, id, b));
      },
      socketDrained: () => this.socketDrained(),
    };
  }

  /**
   * @internal The IN data of operation `id` (stdin, upload, TCP): sent within the stream's credit. Closed when the
   * operation ends.
   */
  streamInput(id: number): StreamInput {
    const input = new StreamInput(this.link(id));
    const p = this.pending.get(id);
    if (p) p.input = input;
    else input.close();
    return input;
  }

  /** @internal Start an operation; `done` settles with its final response. timeoutMs 0 = none. */
  start(
    op: string,
    args: Record<string, unknown>,
    handlers: Omit<Pending, 'op' | 'resolve' | 'reject' | 'timer' | 'input' | 'output'> & {
      timeoutMs?: number;
      signal?: AbortSignal;
    } = {},
  ): { id: number; done: Promise<Record<string, unknown>> } {
    if (this.closedErr) throw this.closedErr;
    return this.open(op, FrameType.Req, requestPayload(op, Buffer.from(JSON.stringify({ op, ...args }))), handlers);
  }

  /**
   * @internal An exec: the binary EXEC frame when the agent offers it (no JSON decoder in the guest), else the
   * `exec` op.
   */
  startExec(
    args: ExecRequestArgs,
    handlers: Parameters<AgentClient['start']>[2],
  ): { id: number; done: Promise<Record<string, unknown>> } {
    const bin = this.info.features.includes('exec.bin') ? encodeExecPayload(args) : undefined;
    if (!bin) return this.start('exec', { ...args }, handlers);
    if (this.closedErr) throw this.closedErr;
    return this.open('exec', FrameType.Exec, requestPayload('exec', bin), handlers);
  }

  /** Send one frame that opens operation `id` and track its answer (a Req, or the binary Hello). */
  private open(
    op: string,
    type: FrameType,
    payload: Buffer,
    handlers: Parameters<AgentClient['start']>[2] = {},
  ): { id: number; done: Promise<Record<string, unknown>> } {
    if (this.closedErr) throw this.closedErr;
    const id = this.nextId++;
    if (this.nextId > 0xffff_fff0) this.nextId = 1;
    const timeoutMs = handlers.timeoutMs ?? this.requestTimeoutMs;
    const done = new Promise<Record<string, unknown>>((resolve, reject) => {
      const p: Pending = {
        op,
        resolve,
        reject,
        onEvent: handlers.onEvent,
        onOut: handlers.onOut,
        onErr: handlers.onErr,
      };
      if (handlers.result) p.result = handlers.result;
      if (handlers.event) p.event = handlers.event;
      if (handlers.onOut || handlers.onErr) p.output = new StreamOutput(this.link(id));
      if (timeoutMs > 0) {
        p.timer = setTimeout(() => {
          this.pending.delete(id);
          p.input?.close();
          // A flow-controlled stream would otherwise wait in the guest for credit that never comes.
          if (p.output || p.input) this.start('cancel', { target: id }).done.catch(() => undefined);
          reject(
            new SandboxError('agent.timeout', `${op} got no answer from the guest agent within ${timeoutMs} ms`, {
              hint: 'the guest may be paused or overloaded',
            }),
          );
        }, timeoutMs);
      }
      const signal = handlers.signal;
      if (signal) {
        const onAbort = () => {
          if (!this.pending.has(id)) return;
          this.pending.delete(id);
          if (p.timer) clearTimeout(p.timer);
          p.input?.close();
          reject(new SandboxError('agent.aborted', `${op} aborted`, { cause: signal.reason }));
          if (!this.closedErr) this.start('cancel', { target: id }).done.catch(() => undefined);
        };
        if (signal.aborted) queueMicrotask(onAbort);
        else signal.addEventListener('abort', onAbort, { once: true });
      }
      this.pending.set(id, p);
    });
    this.socket.write(encodeFrame(type, id, payload));
    return { id, done };
  }

  async request(
    op: string,
    args: Record<string, unknown> = {},
    handlers: Parameters<AgentClient['start']>[2] = {},
  ): Promise<Record<string, unknown>> {
    return this.start(op, args, handlers).done;
  }

  /**
   * The handshake: the binary Hello frame (no JSON for the guest to decode or encode on a fresh clone's
   * first, cold request), or the JSON `hello` op for an agent that predates it (it answers EPROTO).
   */
  private async hello(handlers: { timeoutMs: number; signal?: AbortSignal }): Promise<Record<string, unknown>> {
    const seed = randomBytes(32);
    const payload = Buffer.alloc(8 + seed.length);
    payload.writeBigUInt64BE(BigInt(Date.now()) * 1_000_000n, 0);
    seed.copy(payload, 8);
    try {
      return await this.open('hello', FrameType.Hello, payload, { ...handlers, result: HELLO }).done;
    } catch (err) {
      if (!(err instanceof SandboxError) || err.code !== 'agent.eproto') throw err;
      return this.request(
        'hello',
        { timeUnixNs: Date.now() * 1e6, seed: seed.toString('base64') },
        { ...handlers, result: HELLO },
      );
    }
  }

  async ping(timeoutMs?: number): Promise<void> {
    await this.request('ping', {}, { timeoutMs });
  }

  async health(): Promise<AgentHealth> {
    return (await this.request('health', {}, { result: HEALTH })) as AgentHealth;
  }

  /** Set the guest wall clock (clones and resumed VMs wake with the clock of their snapshot). */
  async setTime(date = new Date()): Promise<void> {
    await this.request('time.set', { timeUnixNs: date.getTime() * 1e6 });
  }

  async sync(): Promise<void> {
    await this.request('sync');
  }

  exec(argv: readonly string[], opts: ExecOptions = {}): ExecProcess {
    return startExecProcess(this, argv, opts);
  }

  /** Run a command to completion and collect its output. */
  async run(argv: readonly string[], opts: Omit<ExecOptions, 'collect'> = {}): Promise<ExecResult> {
    return this.exec(argv, opts).wait();
  }

  /** Open a TCP connection from inside the guest to `host:port` (default 127.0.0.1), as a Duplex stream. */
  async connectTcp(port: number, host = '127.0.0.1'): Promise<Duplex> {
    return connectGuestTcp(this, port, host);
  }
}
