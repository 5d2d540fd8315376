import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { rename, writeFile } from 'node:fs/promises';
import type { Logger } from '../log/logger.js';
import type { SandboxRecord } from './claims.js';
import type { PoolKey } from './pool-key.js';

/**
 * The engine's state on disk (`<dataDir>/state.json`, 0600): the claim table and the warm targets, so a restarted
 * daemon re-attaches its claims and refills its pools. Written whole (tmp + rename), never on the claim path.
 */

export interface SavedState {
  claims: SandboxRecord[];
  targets: Array<{ key: PoolKey; warm: number }>;
}

export class StateFile {
  private persistTimer: NodeJS.Timeout | undefined;
  private persisting: Promise<void> | undefined;

  /** `snapshot` renders the state to write, called at write time (so a coalesced write takes the latest). */
  constructor(
    private readonly path: string,
    private readonly snapshot: () => string,
    private readonly log: Logger,
  ) {}

  read(): SavedState {
    try {
      const s = JSON.parse(readFileSync(this.path, 'utf8')) as {
        claims?: SandboxRecord[];
        targets?: Array<{ key: PoolKey; warm: number }>;
      };
      return { claims: s.claims ?? [], targets: s.targets ?? [] };
    } catch {
      return { claims: [], targets: [] };
    }
  }

  /**
   * State is written off the claim path: coalesced for 20 ms, then written by libuv's thread pool (tmp + rename),
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
        this.log.warn({ err }, 'could not write the claim table; retrying in 1 s');
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
