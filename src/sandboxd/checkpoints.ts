import { randomBytes } from 'node:crypto';
import type { QemuMicrovmDriver, Template } from '../vmm/index.js';
import type { PoolKey } from './pool-key.js';

/**
 * Checkpoints taken of claimed sandboxes: each is a template on disk (the VM's RAM and device state at the time)
 * that new claims clone from, listed newest first.
 */

export interface CheckpointRecord {
  id: string;
  name?: string;
  sandboxId: string;
  key: PoolKey;
  createdAt: string;
  template: Template;
}

export class Checkpoints {
  private readonly checkpoints = new Map<string, CheckpointRecord>();

  constructor(private readonly driver: QemuMicrovmDriver) {}

  /** Record a checkpoint of sandbox `sandboxId` whose snapshot is `template`. */
  add(sandboxId: string, key: PoolKey, template: Template, name?: string): CheckpointRecord {
    const ck: CheckpointRecord = {
      id: `ck_${randomBytes(8).toString('hex')}`,
      sandboxId,
      key,
      createdAt: new Date().toISOString(),
      template,
      ...(name ? { name } : {}),
    };
    this.checkpoints.set(ck.id, ck);
    return ck;
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
