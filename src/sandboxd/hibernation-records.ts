/**
 * Hibernation records (docs/placement.md "Resume anywhere"): where a node replicates checkpoints, a hibernated
 * sandbox's saved state is also published as a checkpoint of kind `hibernation`, which the replicator copies to
 * peers, so the sandbox can resume on another node when its own is gone or draining. Published in the background, one
 * at a time (each is a QEMU loading a guest's memory, and a drain hibernates every sandbox at once), from the state
 * file (read only: the VM stays hibernated and wakes from the same file). Dropped, here and on the peers, when the
 * sandbox wakes, is released, or resumes elsewhere.
 */
import type { Logger } from '../log/logger.js';
import type { MicrovmHandle } from '../vmm/index.js';
import type { CheckpointRecord, Checkpoints } from './checkpoints.js';
import type { SandboxRecord } from './claims.js';

/** What the records need of the node's engine. */
export interface HibernationHost {
  /** The live record of claim `id` (a released one is gone). */
  get(id: string): SandboxRecord | undefined;
  vm(id: string): MicrovmHandle;
  checkpoints: Checkpoints;
  /** The record changed: counter, state file, change feed. */
  changed(rec: SandboxRecord): void;
  /** Write the state file now. */
  flush(): Promise<void>;
  /** Write the state file soon. */
  schedule(): void;
  /** `checkpoint` (a record to copy) and `checkpoint-dropped` (its copies go too). */
  emit(event: 'checkpoint', ck: CheckpointRecord): void;
  emit(event: 'checkpoint-dropped', id: string): void;
}

export class HibernationRecords {
  /** Records being published, one after another (publish() never rejects). */
  private queue: Promise<void> = Promise.resolve();

  constructor(
    private readonly host: HibernationHost,
    private readonly log: Logger,
  ) {}

  /** Publish `rec`'s record once it is its turn (a sandbox just hibernated). */
  enqueue(rec: SandboxRecord): void {
    this.queue = this.queue.then(() => this.publish(rec));
  }

  private async publish(rec: SandboxRecord): Promise<void> {
    const h = this.host;
    const current = () => h.get(rec.id) === rec && rec.hibernated;
    if (!current()) return; // woken or released while it waited its turn
    const t0 = performance.now();
    try {
      const template = await h.vm(rec.id).checkpoint(`${rec.key.template}@hib-${rec.id}`);
      const ck = await h.checkpoints.add(rec.id, rec.key, template, undefined, rec);
      ck.kind = 'hibernation';
      if (rec.network) ck.network = rec.network;
      if (!current()) return this.dropCheckpoint(ck.id);
      rec.hibernationCheckpoint = ck.id;
      h.changed(rec);
      await h.flush();
      this.log.info(
        { sandbox: rec.id, checkpoint: ck.id, ms: Math.round(performance.now() - t0) },
        'hibernation record published',
      );
      h.emit('checkpoint', ck);
    } catch (err) {
      if (current())
        this.log.warn(
          { err, sandbox: rec.id },
          'could not publish the hibernation record; it resumes on this node only',
        );
    }
  }

  /** `rec` woke or went: its record here and the copies on peers go too. */
  drop(rec: SandboxRecord): void {
    const id = rec.hibernationCheckpoint;
    if (!id) return;
    delete rec.hibernationCheckpoint;
    this.dropCheckpoint(id);
  }

  /** A record consumed (resumed here from a peer's copy, or published for a sandbox that woke meanwhile). */
  dropCheckpoint(id: string): void {
    this.host.checkpoints.delete(id);
    this.host.schedule();
    this.host.emit('checkpoint-dropped', id);
  }
}
