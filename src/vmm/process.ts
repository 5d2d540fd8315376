/**
 * QEMU process launcher and registry. Every QEMU we start is tracked by PID until it has exited and
 * been reaped; `liveQemuPids()` is what tests assert on. Processes run in their own process group
 * (so a daemon restart does not take them down and they can be re-adopted), with stdout/stderr going
 * to a log file in the VM's run dir.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, openSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { SandboxError } from '../errors.js';

export interface QemuProcess {
  pid: number;
  /** Resolves with the exit description once the process is gone (and reaped if it was our child). */
  exited: Promise<string>;
  readonly alive: boolean;
  /** SIGKILL and wait for the exit. */
  kill(): Promise<void>;
}

const live = new Map<number, QemuProcess>();

/** PIDs of QEMU processes started (or adopted) by this process that have not exited yet. */
export function liveQemuPids(): number[] {
  return [...live.keys()];
}

/**
 * The fields of /proc/<pid>/stat after the command name (which may hold spaces and parentheses): index 0 is field 3
 * (state), index 11/12 are utime/stime, index 19 is starttime. Undefined once the process is gone.
 */
function statFields(pid: number): string[] | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return undefined;
  }
}

export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
  // A zombie is not alive.
  const f = statFields(pid);
  return f !== undefined && f[0] !== 'Z';
}

/** Field 22 of /proc/<pid>/stat (start time in clock ticks), to tell a PID apart from a reused one. */
export function pidStartTicks(pid: number): number | undefined {
  const f = statFields(pid);
  return f ? Number(f[19]) : undefined;
}

/** CPU time a process has used so far (user + system), in ms; undefined once it is gone. USER_HZ is 100 on Linux. */
export function pidCpuMs(pid: number): number | undefined {
  const f = statFields(pid);
  return f ? (Number(f[11]) + Number(f[12])) * 10 : undefined;
}

/**
 * QEMU gets an empty environment, except the test runner's run marker: it lets `npm test` attribute every VM to the
 * run that started it (its leak check), even when tests run beside other work on the same machine.
 */
function qemuEnv(): NodeJS.ProcessEnv {
  const marker = process.env.SBX_TEST_RUN_ID;
  return marker ? { SBX_TEST_RUN_ID: marker } : {};
}

export function launchQemu(
  binary: string,
  argv: readonly string[],
  opts: { logFile: string; extraFds?: readonly number[]; netns?: string },
): QemuProcess {
  const logFd = openSync(opts.logFile, 'a');
  let child: ChildProcess;
  // nsenter joins the VM's network namespace and execs QEMU: the same pid, so records and kills see QEMU itself.
  const [cmd, args] = opts.netns
    ? ['nsenter', [`--net=/run/netns/${opts.netns}`, '--', binary, ...argv]]
    : [binary, argv];
  try {
    child = spawn(cmd, args, {
      stdio: ['ignore', logFd, logFd, ...(opts.extraFds ?? [])],
      detached: true,
      env: qemuEnv(),
    });
  } finally {
    closeSync(logFd);
  }
  const pid = child.pid;
  if (pid === undefined) {
    throw new SandboxError('vm.spawn-failed', `cannot start ${binary}`, {
      hint: 'install qemu-system-x86 (scripts/bootstrap.sh)',
    });
  }
  child.unref();
  let alive = true;
  const exited = new Promise<string>((resolve) => {
    child.once('exit', (code, signal) => {
      alive = false;
      live.delete(pid);
      resolve(signal ? `killed by ${signal}` : `exit code ${code}`);
    });
  });
  const proc = trackedProcess(
    pid,
    exited,
    () => alive,
    () => {
      if (!alive) return;
      child.ref(); // keep the event loop alive until the exit is reaped
      sigkill(pid);
    },
  );
  live.set(pid, proc);
  return proc;
}

/** Track a QEMU that is not our child (re-adopted after a daemon restart): its exit is polled. */
export function adoptQemu(pid: number): QemuProcess {
  const existing = live.get(pid);
  if (existing) return existing;
  let alive = pidAlive(pid);
  let resolveExit!: (s: string) => void;
  const exited = new Promise<string>((r) => (resolveExit = r));
  const poll = setInterval(() => {
    if (!pidAlive(pid)) {
      alive = false;
      clearInterval(poll);
      live.delete(pid);
      resolveExit('exited');
    }
  }, 20);
  poll.unref();
  const proc = trackedProcess(
    pid,
    exited,
    () => alive,
    () => sigkill(pid),
  );
  if (alive) live.set(pid, proc);
  else {
    clearInterval(poll);
    resolveExit('exited');
  }
  return proc;
}

function trackedProcess(pid: number, exited: Promise<string>, isAlive: () => boolean, signal: () => void): QemuProcess {
  return {
    pid,
    exited,
    get alive() {
      return isAlive();
    },
    async kill() {
      signal();
      await exited;
    },
  };
}

function sigkill(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch (err) {
    // ESRCH: already gone. EPERM is not: QEMU runs as another user (-runas), and a root without CAP_KILL (a
    // container that drops it) cannot signal it; waiting for its exit would hang every release.
    if ((err as NodeJS.ErrnoException).code === 'EPERM')
      throw new SandboxError('vm.kill', `cannot signal QEMU (pid ${pid}): ${(err as Error).message}`, {
        hint: 'sandboxd needs CAP_KILL to stop VMs whose QEMU runs as another user (-runas)',
      });
  }
}

/**
 * Kill what a crash left of template saves under `runRoot` (`mat-*` run dirs: templates.ts materialiseTemplate, for a
 * checkpoint, a fork or a hibernation record): their QEMU has no VM record to be found by, so it is found by its
 * argv, which names its run dir. Then the dirs go. Returns how many processes were killed.
 */
export function reapOrphanMaterialisers(runRoot: string): number {
  let dirs: string[];
  try {
    dirs = readdirSync(runRoot).filter((d) => d.startsWith('mat-'));
  } catch {
    return 0;
  }
  if (!dirs.length) return 0;
  const prefixes = dirs.map((d) => `${join(runRoot, d)}/`);
  let killed = 0;
  for (const entry of readdirSync('/proc')) {
    const pid = Number(entry);
    if (!Number.isInteger(pid) || pid === process.pid) continue;
    let argv: string;
    try {
      argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
    } catch {
      continue;
    }
    if (!prefixes.some((p) => argv.includes(p))) continue;
    try {
      process.kill(pid, 'SIGKILL');
      killed++;
    } catch {
      /* gone meanwhile */
    }
  }
  for (const d of dirs) rmSync(join(runRoot, d), { recursive: true, force: true });
  return killed;
}
