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
 * A small JSON file rewritten whole (tmp + rename) after changes, off the caller's path (the claim gateway's
 * ledger). The engine's claim table, which grows with claims, is journaled instead (engine-state.ts).
 */
export class StateFile {
  private persistTimer: NodeJS.Timeout | undefined;
  private persisting: Promise<void> | undefined;

  /** `snapshot` renders the state to write, called at write time (so a coalesced write takes the latest). */
  constructor(
    private readonly path: string,
    private readonly snapshot: () => string,
    private readonly log: Logger,
  ) {}

  /**
   * Written off the claim path: coalesced for 20 ms, then written by libuv's thread pool (tmp + rename),
   * one write at a time, so a burst of claims never waits on the disk.
   */
  schedule(): void {
    if (this.persistTimer) return;
    this.persistTimer = setTimeout(() => this.persistInBackground(), 20);
  }

  private persistInBackground(): void {
    this.persistTimer = undefined;
    if (this.persisting) {
      this.schedule();
      return;
    }
    const tmp = `${this.path}.tmp`;
    this.persisting = writeFile(tmp, this.snapshot(), { mode: 0o600 })
      .then(() => rename(tmp, this.path))
      .catch((err: unknown) => {
        this.log.warn({ err, path: this.path }, 'could not write the file; retrying in 1 s');
        this.persistTimer ??= setTimeout(() => this.persistInBackground(), 1000);
      })
      .finally(() => (this.persisting = undefined));
  }

  /** Write the state now (shutdown): after any background write, which would otherwise rename over this one. */
  async flush(): Promise<void> {
    if (this.persistTimer) clearTimeout(this.persistTimer);
    this.persistTimer = undefined;
    await this.persisting;
    const tmp = `${this.path}.tmp`;
    writeFileSync(tmp, this.snapshot(), { mode: 0o600 });
    renameSync(tmp, this.path);
  }
}
