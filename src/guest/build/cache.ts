import { createHash } from 'node:crypto';
import { spawn } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  openSync,
  closeSync,
  readFileSync,
  renameSync,
  rmSync,
  writeSync,
  unlinkSync,
} from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { SandboxError } from '../../errors.js';

/** Progress sink for long builds; by default lines go to stderr. */
export type Progress = (line: string) => void;
export const stderrProgress: Progress = (line) => process.stderr.write(`${line}\n`);
export const silentProgress: Progress = () => undefined;

/** `${SBX_CACHE_DIR:-$HOME/.cache/sandbox-operator}/guest` — never inside the repo. */
export function guestCacheRoot(): string {
  const base = process.env.SBX_CACHE_DIR ?? join(homedir(), '.cache', 'sandbox-operator');
  return join(base, 'guest');
}

/** A short, stable content hash over the inputs of a build. */
export function contentHash(parts: readonly (string | Buffer)[]): string {
  const h = createHash('sha256');
  for (const p of parts) {
    const b = typeof p === 'string' ? Buffer.from(p) : p;
    h.update(`${b.length}:`);
    h.update(b);
  }
  return h.digest('hex').slice(0, 16);
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Produce `<root>/<artifact>-<hash>/` exactly once across processes. The directory appears atomically
 * (built in a temp dir, then renamed); a lock file holding the builder's PID serialises builders, and a
 * lock whose PID is dead is taken over.
 */
export async function cachedArtifact(
  artifact: string,
  hash: string,
  build: (tmpDir: string) => Promise<void>,
  opts: { progress?: Progress; lockTimeoutMs?: number; root?: string } = {},
): Promise<string> {
  const progress = opts.progress ?? stderrProgress;
  const root = opts.root ?? guestCacheRoot();
  mkdirSync(root, { recursive: true });
  const dir = join(root, `${artifact}-${hash}`);
  if (existsSync(dir)) return dir;
  const lock = `${dir}.lock`;
  const deadline = Date.now() + (opts.lockTimeoutMs ?? 30 * 60_000);
  let announced = false;
  for (;;) {
    try {
      const fd = openSync(lock, 'wx');
      writeSync(fd, String(process.pid));
      closeSync(fd);
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      let holder = NaN;
      try {
        holder = Number(readFileSync(lock, 'utf8'));
      } catch {
        continue; // lock vanished between open and read
      }
      if (Number.isInteger(holder) && holder > 0 && !pidAlive(holder)) {
        rmSync(lock, { force: true });
        continue;
      }
      if (existsSync(dir)) return dir;
      if (!announced) {
        progress(`${artifact}: waiting for another build (pid ${holder}) to finish`);
        announced = true;
      }
      if (Date.now() > deadline) {
        throw new SandboxError('guest.build-locked', `timed out waiting for the build lock ${lock}`, {
          hint: `if no build is running, remove ${lock}`,
        });
      }
      await sleep(500);
    }
  }
  try {
    if (existsSync(dir)) return dir;
    const tmp = `${dir}.tmp-${process.pid}`;
    rmSync(tmp, { recursive: true, force: true });
    mkdirSync(tmp, { recursive: true });
    const started = Date.now();
    progress(`${artifact}: building ${artifact}-${hash}`);
    try {
      await build(tmp);
    } catch (err) {
      rmSync(tmp, { recursive: true, force: true });
      throw err;
    }
    renameSync(tmp, dir);
    progress(`${artifact}: built in ${((Date.now() - started) / 1000).toFixed(1)} s -> ${dir}`);
    return dir;
  } finally {
    try {
      unlinkSync(lock);
    } catch {
      /* already gone */
    }
  }
}

/** Run a build command; stdout lines starting with `step:`/`progress:` are forwarded as progress. */
export function runStep(
  artifact: string,
  cmd: string,
  args: readonly string[],
  opts: { cwd?: string; env?: NodeJS.ProcessEnv; progress?: Progress } = {},
): Promise<string> {
  const progress = opts.progress ?? stderrProgress;
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd: opts.cwd, env: opts.env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    let buf = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      buf += d.toString();
      let i: number;
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        if (/^(step|progress):/.test(line)) progress(`${artifact}: ${line.replace(/^(step|progress):\s*/, '')}`);
      }
    });
    child.stderr.on('data', (d: Buffer) => {
      err += d.toString();
      if (err.length > 64_000) err = err.slice(-32_000);
    });
    child.on('error', (e) =>
      reject(
        new SandboxError('guest.build-failed', `${artifact}: cannot run ${cmd}: ${e.message}`, {
          cause: e,
          hint: 'run scripts/bootstrap.sh to install the build tools',
        }),
      ),
    );
    child.on('close', (code, signal) => {
      if (code === 0) resolve(out);
      else
        reject(
          new SandboxError(
            'guest.build-failed',
            `${artifact}: ${cmd} ${args.join(' ')} failed (${signal ?? `exit ${code}`}): ${err.trim().slice(-2000)}`,
            {
              hint: 'run scripts/bootstrap.sh to install the build tools, then retry',
            },
          ),
        );
    });
  });
}
