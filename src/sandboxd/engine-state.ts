import { appendFileSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { appendFile, rename, rm, writeFile } from 'node:fs/promises';
import { SandboxError } from '../errors.js';
import type { Logger } from '../log/logger.js';
import type { CheckpointRecord } from './checkpoints.js';
import type { SandboxRecord } from './claims.js';
import type { PoolKey } from './pool-key.js';
import type { PromotedTemplate } from './promoted.js';
import { CoalescedWrites, readJsonFile } from './state-file.js';

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
 * Written off the claim path (coalesced 20 ms, libuv's thread pool, one write at a time), as before; a record
 * changes only with a new `rv` (ClaimRecords.touch), which is how a write finds what changed.
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
  /** Writes of each kind since start (tests check that a claim appends, not rewrites). */
  readonly stats = { snapshots: 0, appends: 0 };

  constructor(
    private readonly path: string,
    private readonly source: EngineStateSource,
    private readonly log: Logger,
  ) {}

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

  private writeInBackground(): Promise<void> | undefined {
    const plan = this.plan();
    if (!plan) return undefined;
    if (plan.kind === 'append') return appendFile(this.journalPath(this.gen), plan.text, { mode: 0o600 });
    return writeFile(`${this.path}.tmp`, plan.text, { mode: 0o600 })
      .then(() => rename(`${this.path}.tmp`, this.path))
      .then(() => {
        const old = this.snapshotWritten(plan.gen);
        return old ? rm(old, { force: true }) : undefined;
      });
  }

  /** Write now, synchronously (shutdown; a checkpoint the API is about to answer for): after any background write. */
  async flush(): Promise<void> {
    await this.writes.settle();
    const plan = this.plan();
    if (!plan) return;
    if (plan.kind === 'append') return appendFileSync(this.journalPath(this.gen), plan.text, { mode: 0o600 });
    writeFileSync(`${this.path}.tmp`, plan.text, { mode: 0o600 });
    renameSync(`${this.path}.tmp`, this.path);
    const old = this.snapshotWritten(plan.gen);
    if (old) rmSync(old, { force: true });
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
