import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { cp, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from '../log/logger.js';
import type { MicrovmDriver, Template } from '../vmm/index.js';
import type { PoolKey } from './pool-key.js';

/**
 * Checkpoints taken of claimed sandboxes: each is a template (the VM's RAM and device state at the time) that new
 * claims clone from, listed newest first. The driver writes a checkpoint's template into its shared template cache;
 * this node moves it to `<dataDir>/checkpoints/<id>/` at once, so everything in that directory is this node's and
 * a start can remove what no saved record accounts for (a crash between the move and the state write).
 */

export interface CheckpointRecord {
  id: string;
  name?: string;
  sandboxId: string;
  key: PoolKey;
  createdAt: string;
  template: Template;
}

const CHECKPOINT_ID = /^ck_[0-9a-f]{16}$/;

export class Checkpoints {
  private readonly checkpoints = new Map<string, CheckpointRecord>();

  constructor(
    private readonly driver: MicrovmDriver,
    /** `<dataDir>/checkpoints`: one directory per checkpoint, named by its id. */
    private readonly root: string,
    private readonly log: Logger,
  ) {
    mkdirSync(root, { recursive: true });
  }

  /** Record a checkpoint of sandbox `sandboxId` whose snapshot is `template`, moving the snapshot into `root`. */
  async add(sandboxId: string, key: PoolKey, template: Template, name?: string): Promise<CheckpointRecord> {
    const id = `ck_${randomBytes(8).toString('hex')}`;
    const dir = join(this.root, id);
    try {
      await moveDir(template.dir, dir);
    } catch (err) {
      this.driver.deleteTemplate(template);
      for (const d of [dir, `${dir}.tmp`]) rmSync(d, { recursive: true, force: true });
      throw err;
    }
    const ck: CheckpointRecord = {
      id,
      sandboxId,
      key,
      createdAt: new Date().toISOString(),
      template: this.driver.loadTemplate(dir),
      ...(name ? { name } : {}),
    };
    this.checkpoints.set(ck.id, ck);
    return ck;
  }

  /**
   * At start: take back the saved records whose snapshot is still on disk (read again from `root`, wherever the
   * data dir was when they were written) and remove every directory in `root` that none of them accounts for.
   */
  restore(saved: readonly CheckpointRecord[]): { restored: number; removed: number } {
    for (const ck of saved) {
      if (!CHECKPOINT_ID.test(ck.id)) {
        this.log.warn({ checkpoint: ck.id }, 'the state file names a checkpoint with a malformed id; dropping it');
        continue;
      }
      try {
        const template = this.driver.loadTemplate(join(this.root, ck.id));
        if (!existsSync(template.memFile) || !existsSync(template.stateFile)) throw new Error('snapshot files missing');
        this.checkpoints.set(ck.id, { ...ck, template });
      } catch (err) {
        this.log.warn({ err, checkpoint: ck.id }, 'a saved checkpoint has no snapshot on disk any more; dropping it');
      }
    }
    let removed = 0;
    for (const entry of readdirSync(this.root)) {
      if (this.checkpoints.has(entry)) continue;
      this.log.info({ dir: join(this.root, entry) }, 'removing a checkpoint directory no record accounts for');
      rmSync(join(this.root, entry), { recursive: true, force: true });
      removed++;
    }
    return { restored: this.checkpoints.size, removed };
  }

  get(id: string): CheckpointRecord | undefined {
    return this.checkpoints.get(id);
  }

  list(): CheckpointRecord[] {
    return [...this.checkpoints.values()].sort((a, b) => b.createdAt.localeCompare(a.createdAt));
  }

  /** Forget the checkpoint and remove its template's files; false when there is none. */
  delete(id: string): boolean {
    const ck = this.checkpoints.get(id);
    if (!ck) return false;
    this.checkpoints.delete(id);
    this.driver.deleteTemplate(ck.template);
    return true;
  }
}

/** rename(2), or copy and remove when `to` is on another filesystem than the template cache. */
async function moveDir(from: string, to: string): Promise<void> {
  try {
    await rename(from, to);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EXDEV') throw err;
    const tmp = `${to}.tmp`; // not a checkpoint id: a crash mid-copy leaves what the next start removes
    await cp(from, tmp, { recursive: true });
    await rename(tmp, to);
    await rm(from, { recursive: true, force: true });
  }
}
