import { snapshotNameProblem } from '../api/index.js';
import type { VmNetworkPolicy } from '../api/vm-network.js';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { cp, mkdtemp, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { SandboxError } from '../errors.js';
import type { Logger } from '../log/logger.js';
import type { MicrovmDriver, Template } from '../vmm/index.js';
import { CHECKPOINT_ID, digestRecord, type FileDigest } from './placement/record.js';
import type { PoolKey } from './pool-key.js';
import { syncDir } from './state-file.js';

/**
 * Checkpoints taken of claimed sandboxes: each is a template (the VM's RAM and device state at the time) that new
 * claims clone from, listed newest first. The driver writes a checkpoint's template into its shared template cache;
 * this node moves it to `<dataDir>/checkpoints/<id>/` at once, so everything in that directory is this node's and
 * a start can remove what no saved record accounts for (a crash between the move and the state write). A record
 * pulled from a peer (docs/placement.md) is unpacked into a staging directory beside them (`.staging-*`, never a
 * checkpoint id, so a start removes one a crash left) and renamed into place whole.
 */

export interface CheckpointRecord {
  id: string;
  name?: string;
  sandboxId: string;
  /**
   * The claim_ref of the sandbox it was taken of (`<namespace>/<name>` for Kubernetes objects), if it had one and
   * no tenant made it: a tenant's claim_ref is a label the tenant chose, and recording it here would file the
   * checkpoint under a namespace the tenant names (sandbox-apiserver serves a checkpoint to the namespace of its
   * claim_ref, and the quota counts it there).
   */
  claimRef?: string;
  /** The tenant whose sandbox it was taken of (tenant tokens); its quota is the tenant's. */
  tenant?: string;
  key: PoolKey;
  createdAt: string;
  template: Template;
  /** Size and SHA-256 of each file in the directory, taken when the record was made here (sent in meta.json). */
  files?: FileDigest[];
  /**
   * `hibernation`: the saved state of a hibernated sandbox, kept (and copied to peers) so it can resume on another
   * node (docs/placement.md "Resume anywhere"); not a snapshot: hidden from snapshot listings, gone on its wake.
   */
  kind?: 'hibernation';
  /** The node that took the checkpoint; absent when this one did. */
  origin?: string;
  /** The peers it was pulled from on its way here, oldest first. */
  via?: string[];
  /**
   * The egress policy of the sandbox it was taken of (SandboxRecord.network), which its clones enforce unless their
   * claim gives one. Kept on this node only: a copy pulled from a peer starts from the secure default.
   */
  network?: VmNetworkPolicy;
}

/** How long a deleted id stays known, so a pull that started before the delete does not publish it again. */
const TOMBSTONE_MS = 60 * 60_000;

/** The default of `--max-checkpoints`. */
export const DEFAULT_MAX_CHECKPOINTS = 256;

/**
 * The default of `--max-checkpoints-per-namespace`: an eighth of the node's, so one namespace (or tenant) can take
 * at most that share of the node's checkpoint budget, and at least eight share a node before its cap is reached.
 */
export const DEFAULT_MAX_CHECKPOINTS_PER_NAMESPACE = 32;

/**
 * The default of `--checkpoint-ttl-hours`: a week. A checkpoint is a copy of a VM's RAM on disk; without a default
 * end, every one ever taken stays until someone deletes it, and the quota fills with forgotten ones. Hibernated and
 * paused sandboxes are not checkpoints: their lease ends them (docs/sandboxd.md "Checkpoint budget").
 */
export const DEFAULT_CHECKPOINT_TTL_HOURS = 168;

/** Who a checkpoint's quota is charged to; what `sandboxd --max-checkpoints-per-namespace` bounds. */
export interface CheckpointOwner {
  claimRef?: string;
  tenant?: string;
}

/**
 * The quota scope of a checkpoint or of the sandbox it is taken of: a tenant's (`tenant:<name>`, as the node's
 * tenant tokens name them) for a tenant's sandbox, else the namespace of its claim_ref (`<namespace>/<name>`, what
 * sandbox-apiserver and the virtual kubelet give), else `''` (the operator's own sandboxes without a claim_ref).
 */
export function checkpointScope(o: CheckpointOwner): string {
  if (o.tenant !== undefined) return `tenant:${o.tenant}`;
  const slash = o.claimRef?.indexOf('/') ?? -1;
  return slash > 0 ? o.claimRef!.slice(0, slash) : '';
}

/** The bounds on taking a checkpoint (0: none). */
export interface CheckpointLimits {
  node: string;
  max: number;
  maxPerScope: number;
}

export class Checkpoints {
  private readonly checkpoints = new Map<string, CheckpointRecord>();
  private readonly deleted = new Map<string, number>();
  /** Checkpoints being taken, per quota scope; they count against the bounds like the ones in the store. */
  private readonly inFlight = new Map<string, number>();
  /** Checkpoints deleted by expire() since the start (sandboxd_checkpoints_expired_total). */
  expiredCount = 0;

  constructor(
    private readonly driver: MicrovmDriver,
    /** `<dataDir>/checkpoints`: one directory per checkpoint, named by its id. */
    private readonly root: string,
    private readonly log: Logger,
  ) {
    mkdirSync(root, { recursive: true });
  }

  /**
   * Before a checkpoint of a sandbox owned by `owner` is taken: the name is checked (snapshot-name.ts), and the
   * node's and the scope's bounds, counting the checkpoints being taken, so concurrent requests cannot pass a bound
   * together. Holds one slot until the returned function is called (after add(), or on failure).
   */
  admit(owner: CheckpointOwner, name: string | undefined, limits: CheckpointLimits): () => void {
    const problem = name === undefined ? undefined : snapshotNameProblem(name);
    if (problem) throw new SandboxError('sandboxd.bad-request', `name: ${problem}`);
    const inFlight = [...this.inFlight.values()].reduce((a, b) => a + b, 0);
    if (limits.max > 0 && this.checkpoints.size + inFlight >= limits.max)
      throw new SandboxError(
        'sandboxd.at-capacity',
        `node ${limits.node} keeps at most ${limits.max} checkpoints (--max-checkpoints)`,
        { hint: 'delete checkpoints that are no longer needed (DELETE /v1/checkpoints/{id})' },
      );
    const scope = checkpointScope(owner);
    const held = this.countScope(scope) + (this.inFlight.get(scope) ?? 0);
    if (limits.maxPerScope > 0 && held >= limits.maxPerScope)
      throw new SandboxError(
        'sandboxd.quota-exceeded',
        `${scope.startsWith('tenant:') ? scope.replace(':', ' ') : `namespace ${scope || '(none)'}`} holds ${held} of its ${limits.maxPerScope} checkpoints on node ${limits.node} (--max-checkpoints-per-namespace)`,
        {
          hint: 'delete snapshots it no longer needs (kubectl sandbox delete-snapshot ID; e2b: DELETE /templates/{id}), or wait for --checkpoint-ttl-hours to expire old ones',
        },
      );
    this.inFlight.set(scope, (this.inFlight.get(scope) ?? 0) + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const n = (this.inFlight.get(scope) ?? 1) - 1;
      if (n > 0) this.inFlight.set(scope, n);
      else this.inFlight.delete(scope);
    };
  }

  /** Checkpoints this node holds in quota scope `scope` (its own and pulled copies: both take its disk). */
  countScope(scope: string): number {
    let n = 0;
    for (const ck of this.checkpoints.values()) if (checkpointScope(ck) === scope) n++;
    return n;
  }

  /** Record a checkpoint of sandbox `sandboxId` whose snapshot is `template`, moving the snapshot into `root`. */
  async add(
    sandboxId: string,
    key: PoolKey,
    template: Template,
    name?: string,
    owner: CheckpointOwner = {},
  ): Promise<CheckpointRecord> {
    const id = `ck_${randomBytes(8).toString('hex')}`;
    const dir = join(this.root, id);
    try {
      await moveDir(template.dir, dir);
    } catch (err) {
      this.driver.deleteTemplate(template);
      for (const d of [dir, `${dir}.tmp`]) rmSync(d, { recursive: true, force: true });
      throw err;
    }
    let files: FileDigest[];
    try {
      files = await digestRecord(dir);
    } catch (err) {
      rmSync(dir, { recursive: true, force: true });
      throw err;
    }
    const ck: CheckpointRecord = {
      id,
      sandboxId,
      key,
      createdAt: new Date().toISOString(),
      template: this.driver.loadTemplate(dir),
      files,
      ...(name ? { name } : {}),
      ...(owner.tenant !== undefined ? { tenant: owner.tenant } : owner.claimRef ? { claimRef: owner.claimRef } : {}),
    };
    this.checkpoints.set(ck.id, ck);
    return ck;
  }

  /** A fresh, empty staging directory on the store's filesystem (so publishing is one rename). */
  stagingDir(): Promise<string> {
    return mkdtemp(join(this.root, '.staging-'));
  }

  /**
   * Publish a record pulled from a peer: `exportDir` (checked, in a staging directory) becomes the checkpoint's
   * directory in one rename, and the record is added. Refused when the id is here already or was deleted after
   * `since` (the pull started before a delete that the fleet was told of).
   */
  async publish(rec: Omit<CheckpointRecord, 'template'>, exportDir: string, since: number): Promise<CheckpointRecord> {
    if (!CHECKPOINT_ID.test(rec.id))
      throw new SandboxError('sandboxd.bad-request', `checkpoint id ${rec.id} is malformed`);
    if (this.checkpoints.has(rec.id)) return this.checkpoints.get(rec.id)!;
    const deletedAt = this.deleted.get(rec.id);
    if (deletedAt !== undefined && deletedAt >= since)
      throw new SandboxError('placement.deleted', `checkpoint ${rec.id} was deleted while it was being pulled`);
    const dir = join(this.root, rec.id);
    await rename(exportDir, dir);
    // The rename is durable once the directory itself is synced.
    await syncDir(this.root);
    const ck: CheckpointRecord = { ...rec, template: this.driver.loadTemplate(dir) };
    this.checkpoints.set(ck.id, ck);
    return ck;
  }

  /** The record's file digests, taken now for a record saved before they were kept (and kept from then on). */
  async digests(ck: CheckpointRecord): Promise<FileDigest[]> {
    ck.files ??= await digestRecord(ck.template.dir);
    return ck.files;
  }

  /**
   * Delete the checkpoints created more than `ttlMs` ago; their ids. A pulled copy keeps the origin's createdAt, so
   * it ends when the original does. A record whose createdAt does not parse is expired too (it could never end).
   */
  expire(ttlMs: number, now = Date.now()): string[] {
    const old = [...this.checkpoints.values()].filter((ck) => !(Date.parse(ck.createdAt) + ttlMs > now));
    for (const ck of old) this.delete(ck.id);
    this.expiredCount += old.length;
    return old.map((ck) => ck.id);
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
    const now = Date.now();
    this.deleted.set(id, now);
    for (const [k, at] of this.deleted) if (at + TOMBSTONE_MS < now) this.deleted.delete(k);
    const ck = this.checkpoints.get(id);
    if (!ck) return false;
    this.checkpoints.delete(id);
    this.driver.deleteTemplate(ck.template);
    return true;
  }
}

/** rename(2), or copy and remove when `to` is on another filesystem than the template cache. */
export async function moveDir(from: string, to: string): Promise<void> {
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
