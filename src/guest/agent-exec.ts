/**
 * Guest processes over the agent connection: starting an exec (output forwarded as it arrives and collected up to
 * a cap), and the handle to a running process (stdin, signals, pty size, its result).
 */
import { constants as osConstants } from 'node:os';
import { SandboxError } from '../errors.js';
import type { AgentClient } from './agent-client.js';
import { check, ExecEvent, ExecResultSchema } from './agent-schemas.js';
import type { StreamInput } from './flow.js';
import type { ExecRequestArgs } from './protocol.js';

export interface ExecOptions extends Omit<ExecRequestArgs, 'argv'> {
  /**
   * Output as it arrives. A handler that returns a promise holds the process back until it settles (with an agent
   * that offers `flow`, the guest sends at most a window of a stream's output ahead of its consumer).
   */
  onStdout?: (chunk: Buffer) => unknown;
  onStderr?: (chunk: Buffer) => unknown;
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

const EXEC_RESULT = check(ExecResultSchema);
const EXEC_EVENT = check(ExecEvent);

function signalNumber(sig: string | number): number {
  if (typeof sig === 'number') return sig;
  const n = (osConstants.signals as Record<string, number | undefined>)[sig.startsWith('SIG') ? sig : `SIG${sig}`];
  if (n === undefined)
    throw new SandboxError('agent.invalid-argument', `unknown signal ${sig}`, {
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
    private readonly stdin: StreamInput,
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

  /**
   * Send bytes to stdin (requires `stdin: true` or a pty). False if some of them wait to be sent (the process
   * has not read what it was sent before): write more after `drained()`, or they queue up here.
   */
  write(data: Buffer | string): boolean {
    this.client.assertOpen();
    return this.stdin.write(typeof data === 'string' ? Buffer.from(data) : data);
  }

  /** Resolves once everything written to stdin has been sent to the guest (or the process has ended). */
  drained(): Promise<void> {
    return this.stdin.drained();
  }

  /** End of stdin, after everything written. */
  closeStdin(): void {
    this.client.assertOpen();
    this.stdin.end();
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
  const sink = (forward: ExecOptions['onStdout']) => {
    const chunks: Buffer[] = [];
    let len = 0;
    const push = (b: Buffer) => {
      const taken = forward?.(b);
      if (!collect) return taken;
      if (len + b.length > max) truncated = true;
      else {
        chunks.push(b);
        len += b.length;
      }
      return taken;
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
    result: EXEC_RESULT,
    event: EXEC_EVENT,
    onEvent: (e) => resolvePid(e.pid as number),
    onOut: out.push,
    onErr: err.push,
  });
  const result = done.then(
    (res) => {
      const r: ExecResult = {
        exitCode: res.exitCode as number,
        timedOut: res.timedOut === true,
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
  return new ExecProcess(client, id, pid, result, client.streamInput(id));
}
