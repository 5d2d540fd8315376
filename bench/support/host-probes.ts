/**
 * What bench/resume reads on the host beside the API: a node's VMs and the saved state, the disk a file or directory
 * takes (allocated blocks, as `du` counts them, hard links once), a QEMU's PSS, and the restore phases the node logs.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { join } from 'node:path';

/** The VMs of a node (run dirs under its run root, docs/vm.md "Run dir and re-adoption"), by VM id. */
function vmDirs(runRoot: string): string[] {
  return readdirSync(runRoot).filter((d) => existsSync(join(runRoot, d, 'vm.json')));
}

export function vmJson(runDir: string): { pid?: number; memoryMiB: number; hibernateFile?: string } {
  return JSON.parse(readFileSync(join(runDir, 'vm.json'), 'utf8')) as {
    pid?: number;
    memoryMiB: number;
    hibernateFile?: string;
  };
}

/**
 * The hibernated VM (the one whose record names a saved state that exists) and that state file (sandboxd keeps it
 * under its data dir, src/vmm/options.ts stateRoot). The API names sandboxes, not VMs, so the bench keeps one
 * sandbox hibernated at a time on a node and finds its VM this way.
 */
export function hibernatedVm(runRoot: string): { vm: string; stateFile: string } {
  const found = vmDirs(runRoot)
    .map((d) => ({ vm: d, stateFile: vmJson(join(runRoot, d)).hibernateFile ?? '' }))
    .filter((f) => f.stateFile && existsSync(f.stateFile));
  if (found.length !== 1) throw new Error(`expected one hibernated VM under ${runRoot}, found ${found.length}`);
  return found[0]!;
}

/** PSS of every running VM of a node, by VM id. */
export function pssByVm(runRoot: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const d of vmDirs(runRoot)) {
    try {
      const pid = vmJson(join(runRoot, d)).pid;
      if (pid) out.set(d, pssBytes(pid));
    } catch {
      // a VM that exited (or a record being rewritten) meanwhile: not running
    }
  }
  return out;
}

/** Reads the whole file in 1 MiB reads (no hashing, nothing kept): what loading it from the page cache or disk costs. */
export async function readWhole(file: string): Promise<{ bytes: number; ms: number }> {
  const t0 = performance.now();
  const fh = await open(file, 'r');
  const buf = Buffer.allocUnsafe(1 << 20);
  let bytes = 0;
  try {
    for (;;) {
      const { bytesRead } = await fh.read(buf, 0, buf.length, bytes);
      if (!bytesRead) break;
      bytes += bytesRead;
    }
  } finally {
    await fh.close();
  }
  return { bytes, ms: performance.now() - t0 };
}

/** Writes back dirty pages and drops the page cache machine-wide (root only; every process's cache goes). */
export function dropCaches(): void {
  execFileSync('sync');
  writeFileSync('/proc/sys/vm/drop_caches', '3');
}

/** Allocated bytes of all `paths` together, as `du -s` counts them (a hard-linked inode once). */
export function duBytes(...paths: string[]): number {
  const out = execFileSync('du', ['-s', '-c', '-B1', ...paths], { encoding: 'utf8' });
  return Number(/^(\d+)\s+total$/m.exec(out)?.[1]);
}

/** A process's proportional set size in bytes (pages shared with other VMs counted in part). */
export function pssBytes(pid: number): number {
  const roll = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
  return Number(/^Pss:\s+(\d+) kB/m.exec(roll)?.[1] ?? NaN) * 1024;
}

/** The filesystem a path is on (`df --output=fstype`): a state file on tmpfs takes RAM, not disk. */
export function fsTypeOf(path: string): string {
  return execFileSync('df', ['--output=fstype', path], { encoding: 'utf8' }).trim().split('\n').pop() ?? '?';
}

/** Where a node's log ends now (its size): startPhases() reads what follows. */
export function logMark(logFile: string): number {
  return statSync(logFile).size;
}

/** The phases (ms) of each `vm started` a node logged at debug level after `from` (vm-core.ts runLoaded), by VM. */
export function startPhases(logFile: string, from: number): Array<{ vm: string; phasesMs: Record<string, number> }> {
  const out: Array<{ vm: string; phasesMs: Record<string, number> }> = [];
  for (const line of readFileSync(logFile).subarray(from).toString('utf8').split('\n')) {
    if (!line.includes('"vm started"')) continue;
    try {
      const j = JSON.parse(line) as { vm?: string; phasesMs?: Record<string, number> };
      if (j.vm && j.phasesMs) out.push({ vm: j.vm, phasesMs: j.phasesMs });
    } catch {
      // a line cut at the mark or by the daemon's exit: skipped
    }
  }
  return out;
}

/**
 * A node's log lines after `from` that name any of `ids` (a sandbox or VM id), as ms from `t0` (epoch ms) and the
 * message with its timing fields: what a wake did between the request and the answer, as the node saw it.
 */
export function logTimeline(logFile: string, from: number, t0: number, ids: readonly string[]): string[] {
  const out: string[] = [];
  for (const line of readFileSync(logFile).subarray(from).toString('utf8').split('\n')) {
    if (!ids.some((id) => line.includes(id))) continue;
    try {
      const j = JSON.parse(line) as Record<string, unknown>;
      const extra = ['from', 'to', 'ms', 'phasesMs'].filter((k) => k in j).map((k) => `${k}=${JSON.stringify(j[k])}`);
      out.push(`+${Date.parse(String(j.time)) - t0} ms ${String(j.msg)} ${extra.join(' ')}`.trim());
    } catch {
      // a line cut at the mark: skipped
    }
  }
  return out;
}
