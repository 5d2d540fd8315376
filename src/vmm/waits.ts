/** Waiting on QEMU without hanging: a deadline on a promise, a rejection when the process exits, and log tails. */
import { readFileSync } from 'node:fs';
import { SandboxError } from '../errors.js';
import type { QemuProcess } from './process.js';

/** The last 400 characters of a log file as `; label: ...`, or '' when it is empty or missing. */
export function tailOf(file: string, label: string): string {
  try {
    const t = readFileSync(file, 'utf8').trim();
    return t ? `; ${label}: ${t.slice(-400)}` : '';
  } catch {
    return '';
  }
}

/** Reject with `err()` once `ms` have passed (what `p` does goes on). */
export async function withDeadline<T>(p: Promise<T>, ms: number, err: () => SandboxError): Promise<T> {
  let t: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      p,
      new Promise<T>((_, reject) => {
        t = setTimeout(() => reject(err()), ms);
      }),
    ]);
  } finally {
    if (t) clearTimeout(t);
  }
}

/** Reject as soon as the process exits (a crash mid-operation must not wait for a timeout). */
export function unlessExited<T>(proc: QemuProcess, p: Promise<T>, what: string, logFile: string): Promise<T> {
  return Promise.race([
    p,
    proc.exited.then((how) => {
      let tail = '';
      try {
        tail = readFileSync(logFile, 'utf8').trim().split('\n').slice(-3).join(' | ');
      } catch {
        /* no log */
      }
      throw new SandboxError('vm.process-exited', `QEMU exited (${how}) during ${what}${tail ? `: ${tail}` : ''}`, {
        hint: `see ${logFile}; a crash here usually means a bad image or snapshot`,
      });
    }),
  ]);
}
