import { readFileSync, rmSync, writeSync } from 'node:fs';
import { open, rm, type FileHandle } from 'node:fs/promises';
import { dirname } from 'node:path';
import { SandboxError } from '../errors.js';
import type { Logger } from '../log/logger.js';
import type { CheckpointRecord } from './checkpoints.js';
import type { SandboxRecord } from './claims.js';
import type { PoolKey } from './pool-key.js';
import type { PromotedTemplate } from './promoted.js';
import {
  appendFileSyncDurably,
  CoalescedWrites,
  readJsonFile,
  replaceFile,
  replaceFileSync,
  syncDir,
} from './state-file.js';

/**
 * The engine's state on disk, written so that a change costs what changed, not the whole claim table (PERFORMANCE.md
 * "Fleet scale": rewriting the whole table after every change took a fifth of a node's loop at 2 500 claims):
 *
 * - `<dataDir>/state.json` (0600, tmp + rename): a snapshot of everything, naming its journal generation `gen`;
 * - `<dataDir>/state.journal.<gen>` (0600, appended): one JSON line per claim change since that snapshot,
 *   `{"put": record}` or `{"del": id}`.
 *
 * Reading = the snapshot, then its own generation's journal replayed in order (a journal of another generation is
 * left over from a compaction a crash cut short and is ignored). A last line cut off by a crash is skipped; any other
 * line that does not parse is an error, like a corrupt snapshot. The warm targets, checkpoints and promoted templates
 * change rarely: a change to them writes a snapshot. So does a journal grown past max(1 MiB, 2 × the snapshot),
 * which bounds the disk and the replay at start to a few snapshots' worth.
 *
 * Written on libuv's thread pool, one write at a time; a record changes only with a new `rv` (ClaimRecords.touch),
 * which is how a write finds what changed. A new claim is answered only once it is on disk (commit(): group commit,
 * so the claims of one burst share a write and its fsync): a claim handed out survives `kill -9` of the daemon at
 * any instant, and with `fsync` (the default) a power loss too. Other changes (renewals, releases, pauses) are
 * written within 20 ms (schedule()), as nobody's answer depends on them surviving a crash.
 */

/** What a restarted daemon needs: its claims (re-attached), warm targets (refilled), checkpoints and templates. */
export interface SavedState {
  claims: SandboxRecord[];
  targets: Array<{ key: PoolKey; warm: number; owner?: string }>;
  checkpoints: CheckpointRecord[];
  promoted: PromotedTemplate[];
}

/** What the engine's state is, read at write time (so a coalesced write takes the latest). */
export interface EngineStateSource {
  claims(): SandboxRecord[];
  /** Everything but the claims (the node name, warm targets, checkpoints, promoted templates). */
  rest(): Omit<SavedState, 'claims'> & Record<string, unknown>;
}

const COMPACT_MIN_BYTES = 1 << 20;

type JournalLine = { put: SandboxRecord } | { del: string };

export class EngineStateFile {
  private readonly writes = new CoalescedWrites(
    () => this.writeInBackground(),
    (err) => {
      this.log.warn({ err }, 'could not write the claim table; retrying in 1 s');
      this.written = undefined; // the next write is a whole snapshot
    },
  );
  private gen = 0;
  /** The generation of the snapshot on disk (its journal is removed once a newer snapshot is there). */
  private diskGen: number | undefined;
  /** Per claim id, the rv the disk holds; undefined until the first write (which is always a snapshot). */
  private written: Map<string, number> | undefined;
  private writtenRest = '';
  private journalBytes = 0;
  private snapshotBytes = 0;
  /** The journal being appended to, kept open between writes (one open and close less per group commit). */
  private journal: { gen: number; fh: FileHandle } | undefined;
  /** Writes of each kind since start (tests check that a claim appends, not rewrites). */
  readonly stats = { snapshots: 0, appends: 0 };
  private readonly fsync: boolean;

  /**
   * `fsync` (default true): a write is on disk (fdatasync, and the directory after a new file) before commit()
   * resolves; false: only written to the kernel, which survives the daemon's crash but not the machine's
   * (`sandboxd --fsync=false`).
   */
  constructor(
    private readonly path: string,
    private readonly source: EngineStateSource,
    private readonly log: Logger,
    opts: { fsync?: boolean } = {},
  ) {
    this.fsync = opts.fsync ?? true;
  }

  private journalPath(gen: number): string {
    return journalPath(this.path, gen);
  }

  /** The saved state (snapshot + its journal); empty when there is none yet, an error when it cannot be read. */
  read(): SavedState {
    const { gen, ...saved } = readEngineState(this.path, this.log);
    if (gen !== undefined) this.gen = this.diskGen = gen;
    return saved;
  }

  /** Write what changed, coalesced for 20 ms, off the caller's path. */
  schedule(): void {
    this.writes.schedule();
  }

  /**
   * Resolves once every change made before the call is on disk (group commit, see CoalescedWrites); rejects when
   * the write failed (the caller undoes its change: nothing may be answered that a restart would not find).
   */
  commit(): Promise<void> {
    return this.writes.commit();
  }

  private writeInBackground(): Promise<void> | undefined {
    const plan = this.plan();
    if (!plan) return undefined;
    if (plan.kind === 'append') return this.append(plan.text);
    // The next append opens the new generation's journal (writes run one at a time: no append is using this one).
    return this.closeJournal()
      .then(() => replaceFile(this.path, plan.text, this.fsync))
      .then(() => {
        const old = this.snapshotWritten(plan.gen);
        return old ? rm(old, { force: true }).catch((err: unknown) => this.oldJournalLeft(old, err)) : undefined;
      });
  }

  private async append(text: string): Promise<void> {
    let j = this.journal;
    if (j?.gen !== this.gen) {
      await this.closeJournal();
      j = this.journal = { gen: this.gen, fh: await open(this.journalPath(this.gen), 'a', 0o600) };
      // The journal may be new: its name must survive a power loss as well as its lines.
      if (this.fsync) await syncDir(dirname(this.path));
    }
    // The lines go to the kernel from this thread (a copy into the page cache: microseconds for a group's few KiB),
    // which saves the claim a hop through libuv's thread pool (~0.3 ms here under load); only the sync, which waits
    // for the disk, goes there.
    const buf = Buffer.from(text);
    for (let off = 0; off < buf.length;) off += writeSync(j.fh.fd, buf, off);
    if (this.fsync) await j.fh.datasync();
  }

  private async closeJournal(): Promise<void> {
    const j = this.journal;
    this.journal = undefined;
    await j?.fh.close();
  }

  /**
   * Write now, synchronously (shutdown; a checkpoint the API is about to answer for): after any background write.
   * Settles the commit() callers still waiting, whose changes this write carries.
   */
  async flush(): Promise<void> {
    await this.writes.settle(() => this.writeNow());
  }

  /** flush(), then let go of the journal (the engine's close; nothing is written after it). */
  async close(): Promise<void> {
    await this.flush();
    await this.closeJournal();
  }

  private writeNow(): void {
    const plan = this.plan();
    if (!plan) return;
    if (plan.kind === 'append') return appendFileSyncDurably(this.journalPath(this.gen), plan.text, this.fsync);
    replaceFileSync(this.path, plan.text, this.fsync);
    const old = this.snapshotWritten(plan.gen);
    try {
      if (old) rmSync(old, { force: true });
    } catch (err) {
      this.oldJournalLeft(old!, err);
    }
  }

  /**
   * The snapshot is written, so the write succeeded: a journal of an older generation is never read again (reading
   * replays only the snapshot's own), and failing to remove it must not fail the claims this write carried.
   */
  private oldJournalLeft(path: string, err: unknown): void {
    this.log.warn({ err, path }, 'could not remove an old state journal (it is not read again); remove it by hand');
  }

  /** The snapshot of `gen` is on disk: the previous one's journal is history; its path, for the caller to remove. */
  private snapshotWritten(gen: number): string | undefined {
    const old = this.diskGen;
    this.diskGen = gen;
    return old !== undefined && old !== gen ? this.journalPath(old) : undefined;
  }

  /**
   * What to write now, with the bookkeeping done as if it succeeded (a failed write resets `written`, so the next
   * one is a snapshot): journal lines for the claims whose rv moved and the ones gone, or a whole snapshot.
   */
  private plan(): { kind: 'append'; text: string } | { kind: 'snapshot'; text: string; gen: number } | undefined {
    const claims = this.source.claims();
    const restObj = this.source.rest();
    const rest = JSON.stringify(restObj);
    const written = this.written;
    if (
      written &&
      rest === this.writtenRest &&
      this.journalBytes <= Math.max(COMPACT_MIN_BYTES, 2 * this.snapshotBytes)
    ) {
      let text = '';
      const live = new Set<string>();
      for (const rec of claims) {
        live.add(rec.id);
        if (written.get(rec.id) === rec.rv) continue;
        written.set(rec.id, rec.rv ?? 0);
        text += `${JSON.stringify({ put: rec })}\n`;
      }
      for (const id of written.keys())
        if (!live.has(id)) {
          written.delete(id);
          text += `${JSON.stringify({ del: id })}\n`;
        }
      if (!text) return undefined;
      this.journalBytes += Buffer.byteLength(text);
      this.stats.appends++;
      return { kind: 'append', text };
    }
    this.gen++;
    const text = JSON.stringify({ ...restObj, gen: this.gen, claims });
    this.written = new Map(claims.map((c) => [c.id, c.rv ?? 0]));
    this.writtenRest = rest;
    this.journalBytes = 0;
    this.snapshotBytes = Buffer.byteLength(text);
    this.stats.snapshots++;
    return { kind: 'snapshot', text, gen: this.gen };
  }
}

function journalPath(statePath: string, gen: number): string {
  return `${statePath.replace(/\.json$/, '')}.journal.${gen}`;
}

/** The state a daemon with this state file would start from (its snapshot, then its journal), and the generation. */
export function readEngineState(path: string, log: Logger): SavedState & { gen?: number } {
  const s = readJsonFile<Partial<SavedState> & { gen?: number }>(
    path,
    'it is written whole (tmp + rename), so something else changed it; move it aside (and state.journal.*) to start with no claims or checkpoints (their VMs and snapshots are then removed)',
  );
  if (!s) return { claims: [], targets: [], checkpoints: [], promoted: [] };
  const claims = new Map((s.claims ?? []).map((c) => [c.id, c]));
  if (typeof s.gen === 'number')
    for (const line of readJournal(journalPath(path, s.gen), log))
      if ('put' in line) claims.set(line.put.id, line.put);
      else claims.delete(line.del);
  return {
    claims: [...claims.values()],
    targets: s.targets ?? [],
    checkpoints: s.checkpoints ?? [],
    promoted: s.promoted ?? [],
    ...(typeof s.gen === 'number' ? { gen: s.gen } : {}),
  };
}

function readJournal(path: string, log: Logger): JournalLine[] {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw new SandboxError('sandboxd.state', `cannot read ${path}: ${(err as Error).message}`, { cause: err });
  }
  const lines = text.split('\n');
  const out: JournalLine[] = [];
  lines.forEach((line, i) => {
    if (!line) return;
    try {
      out.push(JSON.parse(line) as JournalLine);
    } catch (err) {
      // Only the last line can be a torn append (the file is only ever appended to).
      if (i === lines.length - 1) return log.warn({ path }, 'state journal ends in a cut-off line; skipped');
      throw new SandboxError('sandboxd.state', `${path} line ${i + 1} is not valid JSON`, {
        cause: err,
        hint: 'something else changed it; move state.json and state.journal.* aside to start with no claims or checkpoints',
      });
    }
  });
  return out;
}
