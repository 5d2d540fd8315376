import { closeSync, fdatasyncSync, fsyncSync, openSync, readFileSync, renameSync, writeSync } from 'node:fs';
import { open, rename } from 'node:fs/promises';
import { dirname } from 'node:path';
import { SandboxError } from '../errors.js';
import type { Logger } from '../log/logger.js';

/**
 * A JSON file written by a StateFile: undefined when there is none yet; an unreadable or corrupt one is an error
 * (`hint`: what moving it aside costs), never an empty state.
 */
export function readJsonFile<T>(path: string, hint: string): T | undefined {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new SandboxError('sandboxd.state', `cannot read ${path}: ${(err as Error).message}`, { cause: err });
  }
  try {
    return JSON.parse(text) as T;
  } catch (err) {
    throw new SandboxError('sandboxd.state', `${path} is not valid JSON: ${(err as Error).message}`, {
      cause: err,
      hint,
    });
  }
}

/**
 * Replace `path` with `text` (0600): written to `<path>.tmp`, then renamed over it, so a reader sees the old file or
 * the new one, never a part. With `sync`, durable when the promise resolves: the data synced before the rename (a
 * power loss cannot leave an empty file under the new name) and the directory after it (the rename itself).
 */
export async function replaceFile(path: string, text: string, sync: boolean): Promise<void> {
  const tmp = `${path}.tmp`;
  const fh = await open(tmp, 'w', 0o600);
  try {
    await fh.writeFile(text);
    if (sync) await fh.datasync();
  } finally {
    await fh.close();
  }
  await rename(tmp, path);
  if (sync) await syncDir(dirname(path));
}

/** replaceFile, blocking (shutdown, and writes a caller is about to answer for). */
export function replaceFileSync(path: string, text: string, sync: boolean): void {
  const tmp = `${path}.tmp`;
  writeWhole(tmp, 'w', text, sync);
  renameSync(tmp, path);
  if (sync) syncDirSync(dirname(path));
}

/**
 * Append `text` to `path` (0600, created if missing), blocking; with `sync`, on disk when it returns, its directory
 * too (the file may be new).
 */
export function appendFileSyncDurably(path: string, text: string, sync: boolean): void {
  writeWhole(path, 'a', text, sync);
  if (sync) syncDirSync(dirname(path));
}

function writeWhole(path: string, flags: 'w' | 'a', text: string, sync: boolean): void {
  const fd = openSync(path, flags, 0o600);
  try {
    const buf = Buffer.from(text);
    for (let off = 0; off < buf.length;) off += writeSync(fd, buf, off);
    if (sync) fdatasyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** A file created or renamed in `dir` is there after a power loss once `dir` itself is synced. */
export async function syncDir(dir: string): Promise<void> {
  const fh = await open(dir, 'r');
  await fh.sync().finally(() => fh.close());
}

function syncDirSync(dir: string): void {
  const fd = openSync(dir, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

interface Waiter {
  resolve: () => void;
  reject: (err: unknown) => void;
}

/**
 * Writes off the caller's path, run on libuv's thread pool, one at a time; a failed write is tried again 1 s later.
 * `write` returns undefined when there is nothing to write; `failed` hears each failure before the retry.
 *
 * - schedule(): a write within 20 ms (coalesced), for changes nobody waits on;
 * - commit(): a promise that a write begun after the call has finished, i.e. the caller's change is on disk. Group
 *   commit: the first caller starts a write at once (after this turn of the event loop, so the callers of one turn
 *   share it); callers arriving while it runs share the next one, which starts as soon as it ends. A burst of claims
 *   costs one write per write's duration, not one per claim.
 */
export class CoalescedWrites {
  private timer: NodeJS.Timeout | undefined;
  private immediate: NodeJS.Immediate | undefined;
  private inFlight: Promise<void> | undefined;
  /** commit() callers whose change no write has started to carry yet. */
  private waiting: Waiter[] = [];

  constructor(
    private readonly write: () => Promise<void> | undefined,
    private readonly failed: (err: unknown) => void,
  ) {}

  schedule(): void {
    this.timer ??= setTimeout(() => this.run(), 20);
  }

  commit(): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.waiting.push({ resolve, reject });
      if (!this.inFlight) this.immediate ??= setImmediate(() => this.run());
    });
  }

  private run(): void {
    if (this.timer) clearTimeout(this.timer);
    if (this.immediate) clearImmediate(this.immediate);
    this.timer = this.immediate = undefined;
    if (this.inFlight) {
      // Runs again when the write in flight ends (waiters), or within 20 ms (a scheduled change).
      if (!this.waiting.length) this.schedule();
      return;
    }
    const batch = this.waiting;
    this.waiting = [];
    let write: Promise<void> | undefined;
    try {
      write = this.write();
    } catch (err) {
      write = Promise.reject(err);
    }
    if (!write) {
      for (const w of batch) w.resolve();
      return;
    }
    this.inFlight = write
      .then(
        () => {
          for (const w of batch) w.resolve();
        },
        (err: unknown) => {
          this.failed(err);
          for (const w of batch) w.reject(err);
          this.timer ??= setTimeout(() => this.run(), 1000);
        },
      )
      .finally(() => {
        this.inFlight = undefined;
        // The group that gathered during this write goes now.
        if (this.waiting.length) this.run();
      });
  }

  /**
   * Drop the pending write and wait for the one in flight; then `writeNow` writes synchronously, last, and settles
   * the commit() callers still waiting (it carries their changes).
   */
  async settle(writeNow: () => void): Promise<void> {
    while (this.inFlight) await this.inFlight;
    if (this.timer) clearTimeout(this.timer);
    if (this.immediate) clearImmediate(this.immediate);
    this.timer = this.immediate = undefined;
    const batch = this.waiting;
    this.waiting = [];
    try {
      writeNow();
    } catch (err) {
      for (const w of batch) w.reject(err);
      throw err;
    }
    for (const w of batch) w.resolve();
  }
}

/**
 * A small JSON file rewritten whole (tmp + rename) after changes, off the caller's path (the claim gateway's
 * ledger). The engine's claim table, which grows with claims, is journaled instead (engine-state.ts).
 */
export class StateFile {
  private readonly writes: CoalescedWrites;

  /** `snapshot` renders the state to write, called at write time (so a coalesced write takes the latest). */
  constructor(
    private readonly path: string,
    private readonly snapshot: () => string,
    log: Logger,
  ) {
    // Not synced: nobody waits on this file (the claim gateway's ledger is written after the answer).
    this.writes = new CoalescedWrites(
      () => replaceFile(this.path, this.snapshot(), false),
      (err) => log.warn({ err, path }, 'could not write the file; retrying in 1 s'),
    );
  }

  /** Write the file soon (coalesced, tmp + rename, off the caller's path). */
  schedule(): void {
    this.writes.schedule();
  }

  /** Write the state now (shutdown): after any background write, which would otherwise rename over this one. */
  async flush(): Promise<void> {
    await this.writes.settle(() => replaceFileSync(this.path, this.snapshot(), false));
  }
}
