import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { rename, writeFile } from 'node:fs/promises';
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
 * Writes off the caller's path: coalesced for 20 ms, then run on libuv's thread pool, one at a time, so a burst of
 * claims never waits on the disk; a failed write is tried again 1 s later. `write` returns undefined when there is
 * nothing to write; `failed` hears each failure before the retry.
 */
export class CoalescedWrites {
  private timer: NodeJS.Timeout | undefined;
  private inFlight: Promise<void> | undefined;

  constructor(
    private readonly write: () => Promise<void> | undefined,
    private readonly failed: (err: unknown) => void,
  ) {}

  schedule(): void {
    this.timer ??= setTimeout(() => this.run(), 20);
  }

  private run(): void {
    this.timer = undefined;
    if (this.inFlight) return this.schedule();
    this.inFlight = this.write()
      ?.catch((err: unknown) => {
        this.failed(err);
        this.timer ??= setTimeout(() => this.run(), 1000);
      })
      .finally(() => (this.inFlight = undefined));
  }

  /** Drop the pending write and wait for the one in flight: the caller then writes synchronously, last. */
  async settle(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    await this.inFlight;
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
    const tmp = `${path}.tmp`;
    this.writes = new CoalescedWrites(
      () => writeFile(tmp, this.snapshot(), { mode: 0o600 }).then(() => rename(tmp, this.path)),
      (err) => log.warn({ err, path }, 'could not write the file; retrying in 1 s'),
    );
  }

  /** Write the file soon (coalesced, tmp + rename, off the caller's path). */
  schedule(): void {
    this.writes.schedule();
  }

  /** Write the state now (shutdown): after any background write, which would otherwise rename over this one. */
  async flush(): Promise<void> {
    await this.writes.settle();
    const tmp = `${this.path}.tmp`;
    writeFileSync(tmp, this.snapshot(), { mode: 0o600 });
    renameSync(tmp, this.path);
  }
}
