/**
 * The processes envd started in one sandbox, by guest pid (and optional tag): their configuration for List, their
 * agent exec handle for input, signals and pty size, and the streams subscribed to their events (the Start stream
 * and any Connect streams). Output goes to every subscriber; a subscriber that falls behind holds the process back
 * (agent flow control), one that stops reading is dropped. A process without subscribers runs on, its output
 * discarded, until it exits or is killed, as envd's do.
 */
import { Code, ConnectError } from '@connectrpc/connect';
import type { AgentClient, ExecProcess, ExecResult } from '../../guest/index.js';
import { EventQueue } from './event-queue.js';
import { toConnectError } from './errors.js';

export interface ProcessConfig {
  cmd: string;
  args: string[];
  envs: Record<string, string>;
  cwd?: string;
}

export type ProcessEventInit =
  | { case: 'data'; value: { output: { case: 'stdout' | 'stderr' | 'pty'; value: Uint8Array } } }
  | { case: 'end'; value: { exitCode: number; exited: boolean; status: string; error?: string } }
  | { case: 'keepalive'; value: object };

export interface StartSpec {
  config: ProcessConfig;
  /** The environment the command runs with (sandbox-wide, user and request variables merged). */
  env: Record<string, string>;
  cwd: string;
  uid: number;
  gid: number;
  tag?: string;
  stdin: boolean;
  pty?: { cols: number; rows: number };
}

/** Go's names for the signals a process may die of (envd's `status` is Go's ProcessState.String()). */
const SIGNAL_TEXT: Record<string, string> = {
  SIGHUP: 'hangup',
  SIGINT: 'interrupt',
  SIGQUIT: 'quit',
  SIGABRT: 'aborted',
  SIGKILL: 'killed',
  SIGSEGV: 'segmentation fault',
  SIGPIPE: 'broken pipe',
  SIGALRM: 'alarm clock',
  SIGTERM: 'terminated',
  SIGUSR1: 'user defined signal 1',
  SIGUSR2: 'user defined signal 2',
};

/** An exec result as envd's end event: a signal death is exit code -1, not exited, `signal: killed`. */
export function endEvent(r: ExecResult): ProcessEventInit & { case: 'end' } {
  if (r.signal) {
    const status = `signal: ${SIGNAL_TEXT[r.signal] ?? r.signal}`;
    return { case: 'end', value: { exitCode: -1, exited: false, status, error: status } };
  }
  const status = `exit status ${r.exitCode}`;
  return {
    case: 'end',
    value: { exitCode: r.exitCode, exited: true, status, ...(r.exitCode ? { error: status } : {}) },
  };
}

const KEEPALIVE: ProcessEventInit = { case: 'keepalive', value: {} };

/** The bytes an event holds (its output; the rest is small and counted per item by the queue). */
const eventBytes = (ev: ProcessEventInit): number => (ev.case === 'data' ? ev.value.output.value.byteLength : 0);

export class GuestProcess {
  readonly subscribers = new Set<EventQueue<ProcessEventInit>>();
  constructor(
    readonly pid: number,
    readonly spec: StartSpec,
    readonly exec: ExecProcess,
  ) {}

  get tag(): string | undefined {
    return this.spec.tag;
  }

  get hasInput(): boolean {
    return this.spec.stdin || this.spec.pty !== undefined;
  }

  /** A stream of this process's events from now on. */
  subscribe(keepaliveMs: number): EventQueue<ProcessEventInit> {
    const q = new EventQueue<ProcessEventInit>({
      sizeOf: eventBytes,
      keepalive: { everyMs: keepaliveMs, item: KEEPALIVE },
    });
    this.subscribers.add(q);
    return q;
  }

  /** Deliver to every live subscriber; resolves when the slowest is below its high-water mark. */
  deliver(ev: ProcessEventInit): Promise<unknown> | undefined {
    let waits: Promise<void>[] | undefined;
    for (const q of this.subscribers) {
      if (q.closed) {
        this.subscribers.delete(q);
        continue;
      }
      const w = q.push(ev);
      if (w) (waits ??= []).push(w);
    }
    return waits && Promise.all(waits);
  }

  closeAll(err?: ConnectError): void {
    for (const q of this.subscribers) q.close(err);
    this.subscribers.clear();
  }
}

export class ProcessTable {
  private readonly byPid = new Map<number, GuestProcess>();

  list(): GuestProcess[] {
    return [...this.byPid.values()];
  }

  find(selector: { case: 'pid'; value: number } | { case: 'tag'; value: string } | { case: undefined }): GuestProcess {
    let p: GuestProcess | undefined;
    if (selector.case === 'pid') p = this.byPid.get(selector.value);
    else if (selector.case === 'tag') p = this.list().find((x) => x.tag === selector.value);
    else throw new ConnectError('process: a pid or a tag is required', Code.InvalidArgument);
    if (!p) throw new ConnectError(`process ${String(selector.value)} not found`, Code.NotFound);
    return p;
  }

  /**
   * Start a process; resolves once it runs, with the first subscriber (the Start stream) attached before any
   * output can arrive.
   */
  async start(
    agent: AgentClient,
    spec: StartSpec,
    keepaliveMs: number,
  ): Promise<{ proc: GuestProcess; events: EventQueue<ProcessEventInit> }> {
    if (spec.tag !== undefined && this.list().some((p) => p.tag === spec.tag))
      throw new ConnectError(`a process with tag "${spec.tag}" is running`, Code.AlreadyExists);
    // Assigned once the pid is known; output that arrives before then waits in `early`, and its credit is held
    // until it has been delivered: the guest can send at most one window of it (flow control), however long
    // `started` takes or if it never comes.
    // eslint-disable-next-line prefer-const
    let proc: GuestProcess | undefined;
    const early: ProcessEventInit[] = [];
    let flushEarly!: (delivered: Promise<unknown>) => void;
    const earlyDelivered = new Promise<unknown>((r) => (flushEarly = r));
    const emit = (ev: ProcessEventInit) => {
      if (proc) return proc.deliver(ev);
      early.push(ev);
      return earlyDelivered;
    };
    const output = (kind: 'stdout' | 'stderr' | 'pty') => (b: Buffer) =>
      emit({
        case: 'data',
        value: { output: { case: kind, value: new Uint8Array(b.buffer, b.byteOffset, b.length) } },
      });
    const exec = agent.exec([spec.config.cmd, ...spec.config.args], {
      env: spec.env,
      cwd: spec.cwd,
      uid: spec.uid,
      gid: spec.gid,
      stdin: spec.stdin || spec.pty !== undefined,
      pty: spec.pty,
      collect: false,
      onStdout: output(spec.pty ? 'pty' : 'stdout'),
      onStderr: output('stderr'),
    });
    let pid: number;
    try {
      pid = await exec.pid;
    } catch (err) {
      early.length = 0;
      flushEarly(Promise.resolve());
      throw toConnectError(err);
    }
    proc = new GuestProcess(pid, spec, exec);
    const events = proc.subscribe(keepaliveMs);
    flushEarly(Promise.all(early.splice(0).map((ev) => proc.deliver(ev))));
    this.byPid.set(pid, proc);
    const p = proc;
    exec.result.then(
      (r) => {
        this.byPid.delete(pid);
        p.deliver(endEvent(r));
        p.closeAll();
      },
      (err: unknown) => {
        this.byPid.delete(pid);
        p.closeAll(toConnectError(err));
      },
    );
    return { proc, events };
  }

  /** The agent connection went away (the sandbox paused or was released): no stream of it can go on. */
  detachAll(reason: string): void {
    for (const p of this.byPid.values()) p.closeAll(new ConnectError(reason, Code.Unavailable));
    this.byPid.clear();
  }
}
