/**
 * Guest processes over the agent connection: starting an exec (output forwarded as it arrives and collected up to
 * a cap), and the handle to a running process (stdin, signals, pty size, its result).
 */
import { constants as osConstants } from 'node:os';
import { SandboxError } from '../errors.js';
import type { AgentClient } from './agent-client.js';
import { FrameType, MAX_PAYLOAD, type ExecRequestArgs } from './protocol.js';

export interface ExecOptions extends Omit<ExecRequestArgs, 'argv'> {
  onStdout?: (chunk: Buffer) => void;
  onStderr?: (chunk: Buffer) => void;
  /** Collect output into the result (capped at maxOutputBytes per stream). @default true */
  collect?: boolean;
  /** @default 64 MiB */
  maxOutputBytes?: number;
  signal?: AbortSignal;
}

export interface ExecResult {
  exitCode: number;
  /** Set if the process died from a signal (then exitCode is 128+n). */
  signal?: string;
  timedOut: boolean;
  stdout: Buffer;
  stderr: Buffer;
  /** True if output was cut at maxOutputBytes. */
  truncated: boolean;
}

function signalNumber(sig: string | number): number {
  if (typeof sig === 'number') return sig;
  const n = (osConstants.signals as Record<string, number | undefined>)[sig.startsWith('SIG') ? sig : `SIG${sig}`];
  if (n === undefined)
    throw new SandboxError('INVALID_ARGUMENT', `unknown signal ${sig}`, {
      hint: 'use a name like SIGTERM or a number',
    });
  return n;
}

/** A running guest process. */
export class ExecProcess {
  readonly pid: Promise<number>;
  readonly result: Promise<ExecResult>;

  constructor(
    private readonly client: AgentClient,
    readonly id: number,
    pid: Promise<number>,
    result: Promise<ExecResult>,
  ) {
    this.pid = pid;
    this.result = result;
    // Callers that only use `wait()` later must not see an unhandled rejection in between.
    pid.catch(() => undefined);
    result.catch(() => undefined);
  }

  wait(): Promise<ExecResult> {
    return this.result;
  }

  /** Send bytes to stdin (requires `stdin: true` or a pty). */
  write(data: Buffer | string): void {
    const b = typeof data === 'string' ? Buffer.from(data) : data;
    for (let off = 0; off < b.length; off += MAX_PAYLOAD)
      this.client.sendRaw(FrameType.In, this.id, b.subarray(off, off + MAX_PAYLOAD));
  }

  closeStdin(): void {
    this.client.sendRaw(FrameType.In, this.id, Buffer.alloc(0));
  }

  /** Signal the process group. */
  async kill(signal: string | number = 'SIGTERM'): Promise<void> {
    await this.client.request('signal', { target: this.id, signal: signalNumber(signal) });
  }

  async resize(cols: number, rows: number): Promise<void> {
    await this.client.request('resize', { target: this.id, cols, rows });
  }
}

/** Start `argv` in the guest (AgentClient.exec). */
export function startExecProcess(client: AgentClient, argv: readonly string[], opts: ExecOptions = {}): ExecProcess {
  const collect = opts.collect ?? true;
  const max = opts.maxOutputBytes ?? 64 << 20;
  let truncated = false;
  /** One output stream: forwarded as it arrives, and collected up to `max` bytes. */
  const sink = (forward: ((chunk: Buffer) => void) | undefined) => {
    const chunks: Buffer[] = [];
    let len = 0;
    const push = (b: Buffer) => {
      forward?.(b);
      if (!collect) return;
      if (len + b.length > max) truncated = true;
      else {
        chunks.push(b);
        len += b.length;
      }
    };
    return { chunks, push };
  };
  const out = sink(opts.onStdout);
  const err = sink(opts.onStderr);
  let resolvePid!: (pid: number) => void;
  let rejectPid!: (e: Error) => void;
  const pid = new Promise<number>((res, rej) => {
    resolvePid = res;
    rejectPid = rej;
  });
  const args: ExecRequestArgs = {
    argv,
    env: opts.env,
    cwd: opts.cwd,
    stdin: opts.stdin,
    pty: opts.pty,
    timeoutMs: opts.timeoutMs,
    uid: opts.uid,
    gid: opts.gid,
  };
  const { id, done } = client.startExec(args, {
    timeoutMs: opts.timeoutMs ? opts.timeoutMs + 10_000 : 0,
    signal: opts.signal,
    onEvent: (e) => {
      if (e.type === 'started') resolvePid(Number(e.pid));
    },
    onOut: out.push,
    onErr: err.push,
  });
  const result = done.then(
    (res) => {
      const r: ExecResult = {
        exitCode: Number(res.exitCode),
        timedOut: Boolean(res.timedOut),
        stdout: Buffer.concat(out.chunks),
        stderr: Buffer.concat(err.chunks),
        truncated,
      };
      if (typeof res.signal === 'string') r.signal = res.signal;
      return r;
    },
    (e: unknown) => {
      rejectPid(e as Error);
      throw e;
    },
  );
  return new ExecProcess(client, id, pid, result);
}
