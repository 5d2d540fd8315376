import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { SandboxError } from '../errors.js';
import { GUEST_TEMPLATES } from '../guest/index.js';
import type { Logger } from '../log/logger.js';
import type { MicrovmDriver, Template } from '../vmm/index.js';
import { moveDir } from './checkpoints.js';
import { digestRecord, type FileDigest } from './placement/record.js';
import { keyString, normalizeTemplate, type PoolKey } from './pool-key.js';

/**
 * Node-local templates made from a sandbox (`POST /v1/sandboxes/{id}/promote`, docs/placement.md "Promote: `POST /v1/sandboxes/{id}/promote {template}`"): the VM's
 * state at that moment, published under (name, the sandbox's net, its size); claims and pools for that key clone
 * from it like from a built-in template. Kept in `<data-dir>/templates/<id>/` with their records in state.json, so
 * they survive restarts; promoting the same key again replaces the template (clones already running keep theirs).
 * They never leave the node.
 */
export interface PromotedTemplate {
  key: PoolKey;
  sandboxId: string;
  createdAt: string;
  files: FileDigest[];
  template: Template;
}

const NAME = /^[a-z0-9][a-z0-9._/:@-]{0,127}$/;

export class PromotedTemplates {
  private readonly byKey = new Map<string, PromotedTemplate>();

  constructor(
    private readonly driver: MicrovmDriver,
    /** `<dataDir>/templates`. */
    private readonly root: string,
    private readonly log: Logger,
  ) {
    mkdirSync(root, { recursive: true });
  }

  /** The key a sandbox of key `from` is promoted under as `name`; 400/409 for a name that cannot be one. */
  static keyFor(name: string, from: PoolKey): PoolKey {
    const template = normalizeTemplate(name);
    if (!NAME.test(template))
      throw new SandboxError(
        'sandboxd.bad-request',
        `template: "${name}" is not a template name (lowercase, [a-z0-9._/:@-])`,
      );
    if (GUEST_TEMPLATES[template])
      throw new SandboxError('sandboxd.conflict', `template: ${template} is a built-in template`, {
        hint: 'promote under another name, e.g. myproj:v1',
      });
    return { template, net: from.net, size: from.size };
  }

  async add(key: PoolKey, sandboxId: string, snapshot: Template): Promise<PromotedTemplate> {
    const dir = join(this.root, `tpl_${randomBytes(8).toString('hex')}`);
    let files: FileDigest[];
    try {
      await moveDir(snapshot.dir, dir);
      files = await digestRecord(dir);
    } catch (err) {
      this.driver.deleteTemplate(snapshot);
      rmSync(dir, { recursive: true, force: true });
      throw err;
    }
    const p: PromotedTemplate = {
      key,
      sandboxId,
      createdAt: new Date().toISOString(),
      files,
      template: this.driver.loadTemplate(dir),
    };
    const old = this.byKey.get(keyString(key));
    this.byKey.set(keyString(key), p);
    if (old) this.driver.deleteTemplate(old.template);
    return p;
  }

  get(key: PoolKey): Template | undefined {
    return this.byKey.get(keyString(key))?.template;
  }

  /** Whether any key of this node uses the name. */
  has(name: string): boolean {
    for (const p of this.byKey.values()) if (p.key.template === name) return true;
    return false;
  }

  list(): PromotedTemplate[] {
    return [...this.byKey.values()];
  }

  /** At start: take back the saved ones whose files are there; remove every directory none of them names. */
  restore(saved: readonly PromotedTemplate[]): number {
    for (const p of saved) {
      const dir = join(this.root, p.template.dir.split('/').pop() ?? '');
      try {
        const template = this.driver.loadTemplate(dir);
        if (!existsSync(template.memFile) || !existsSync(template.stateFile)) throw new Error('snapshot files missing');
        this.byKey.set(keyString(p.key), { ...p, template });
      } catch (err) {
        this.log.warn({ err, key: p.key }, 'a promoted template has no files on disk any more; dropping it');
      }
    }
    const kept = new Set([...this.byKey.values()].map((p) => p.template.dir));
    for (const entry of readdirSync(this.root)) {
      if (kept.has(join(this.root, entry))) continue;
      this.log.info({ dir: join(this.root, entry) }, 'removing a template directory no record accounts for');
      rmSync(join(this.root, entry), { recursive: true, force: true });
    }
    return this.byKey.size;
  }
}
