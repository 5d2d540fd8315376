import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { SandboxError } from '../errors.js';
import { isAlive } from './file-lock.js';

export interface ManagedProcess {
  name: string;
  pid: number;
  logPath: string;
  child: ChildProcess;
  /** Resolves with the exit code (or signal) when the process ends. */
  exited: Promise<string>;
}

/**
 * Processes started by one control plane. Each gets its own log file; `stop()` kills exactly these PIDs, last
 * started first, and waits for them to be gone.
 */
export class ProcessGroup {
  private readonly procs: ManagedProcess[] = [];

  constructor(private readonly logDir: string) {}

  get pids(): number[] {
    return this.procs.map((p) => p.pid);
  }

  list(): readonly ManagedProcess[] {
    return this.procs;
  }

  start(name: string, argv: string[], env: NodeJS.ProcessEnv = {}): ManagedProcess {
    const [cmd, ...args] = argv;
    if (!cmd) throw new SandboxError('cluster.process', `empty command for ${name}`);
    const logPath = join(this.logDir, `${name}.log`);
    const log = createWriteStream(logPath, { flags: 'a' });
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
    // Two sources, one file: neither may end it (the other may still write, e.g. a process that exits with an error
    // after closing stdout); it ends when the process is gone and both are drained.
    child.stdout?.pipe(log, { end: false });
    child.stderr?.pipe(log, { end: false });
    child.on('close', () => log.end());
    if (child.pid === undefined) throw new SandboxError('cluster.process', `could not start ${name} (${cmd})`);
    const exited = new Promise<string>((resolve) => {
      child.on('error', (err) => resolve(`error: ${err.message}`));
      child.on('exit', (code, signal) => resolve(signal ? `signal ${signal}` : `exit code ${code}`));
    });
    const proc: ManagedProcess = { name, pid: child.pid, logPath, child, exited };
    this.procs.push(proc);
    return proc;
  }

  /** Throw a clear error naming the process and its last log lines if it has already died. */
  async assertRunning(proc: ManagedProcess): Promise<void> {
    if (proc.child.exitCode === null && proc.child.signalCode === null) return;
    throw await this.diedError(proc, await proc.exited);
  }

  async diedError(proc: ManagedProcess, how: string): Promise<SandboxError> {
    const tail = await logTail(proc.logPath, 15);
    const hint = /address already in use/i.test(tail)
      ? 'a port it needs is in use: stop whatever listens there (ss -ltnp) or choose other ports'
      : `see the full log at ${proc.logPath}`;
    return new SandboxError('cluster.process-died', `${proc.name} exited (${how}). Last log lines:\n${tail}`, { hint });
  }

  async stop(timeoutMs = 10_000): Promise<void> {
    for (const proc of [...this.procs].reverse()) await stopOne(proc, timeoutMs);
  }
}

async function stopOne(proc: ManagedProcess, timeoutMs: number): Promise<void> {
  if (!isAlive(proc.pid)) return;
  proc.child.kill('SIGTERM');
  const done = await Promise.race([proc.exited.then(() => true), sleep(timeoutMs).then(() => false)]);
  if (!done) {
    proc.child.kill('SIGKILL');
    await proc.exited;
  }
}

export async function logTail(path: string, lines: number): Promise<string> {
  const text = await readFile(path, 'utf8').catch(() => '');
  return text.trimEnd().split('\n').slice(-lines).join('\n');
}

export interface ProcessInfo {
  pid: number;
  /** argv joined by spaces. */
  cmd: string;
  /** The raw NUL-separated environment, when asked for (only readable for our own user's processes). */
  environ?: string;
}

/** Every process on this machine, from /proc; ones that exit mid-scan are skipped. */
export async function listProcesses(opts: { environ?: boolean } = {}): Promise<ProcessInfo[]> {
  const out: ProcessInfo[] = [];
  for (const entry of await readdir('/proc')) {
    const pid = Number(entry);
    if (!Number.isInteger(pid)) continue;
    try {
      const cmd = (await readFile(`/proc/${pid}/cmdline`, 'latin1')).split('\0').join(' ').trim();
      const info: ProcessInfo = { pid, cmd };
      if (opts.environ) info.environ = await readFile(`/proc/${pid}/environ`, 'latin1');
      out.push(info);
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
  return out;
}
