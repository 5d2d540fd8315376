/**
 * The engine's state file: a claim change appends a journal line instead of rewriting the table, a restart reads
 * snapshot + journal back to the same table, other state writes a snapshot (and drops the old journal), the journal
 * is compacted once it outgrows the snapshot, and a cut-off last line (a crash mid-append) is skipped while a corrupt
 * line before it is an error.
 */
import assert from 'node:assert/strict';
import { appendFileSync, existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { silentLogger } from '../../src/log/logger.js';
import type { SandboxRecord } from '../../src/sandboxd/claims.js';
import { EngineStateFile, readEngineState } from '../../src/sandboxd/engine-state.js';
import { eventually } from '../support/eventually.js';

const key = { template: 'sandbox/minimal', net: 'none', size: 'small' } as const;

/** A table the way the engine keeps it: every change gets a new rv. */
class Table {
  readonly recs = new Map<string, SandboxRecord>();
  targets: Array<{ key: typeof key; warm: number }> = [{ key, warm: 2 }];
  private rv = 0;
  put(id: string, extra: Partial<SandboxRecord> = {}): SandboxRecord {
    const rec: SandboxRecord = {
      id,
      token: `t-${id}`,
      key,
      vmId: `vm-${id}`,
      claimedAt: '2026-12-01T00:00:00.000Z',
      deadline: '2026-12-02T00:00:00.000Z',
      hibernated: false,
      source: 'warm',
      ...this.recs.get(id),
      ...extra,
      rv: ++this.rv,
    };
    this.recs.set(id, rec);
    return rec;
  }
  file(path: string): EngineStateFile {
    return new EngineStateFile(
      path,
      {
        claims: () => [...this.recs.values()],
        rest: () => ({ node: 'n1', targets: this.targets, checkpoints: [], promoted: [] }),
      },
      silentLogger,
    );
  }
}

describe('sandboxd engine state file (snapshot + journal)', () => {
  const dirs: string[] = [];
  after(async () => Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true }))));
  const fresh = async () => {
    const d = await mkdtemp(join(tmpdir(), 'sbx-state-'));
    dirs.push(d);
    return join(d, 'state.json');
  };
  const journals = (path: string) =>
    readdirSync(join(path, '..'))
      .filter((f) => f.startsWith('state.journal.'))
      .sort();
  /** sb_a in a snapshot, then sb_b in its journal. */
  const snapshotThenAppend = async () => {
    const path = await fresh();
    const t = new Table();
    t.put('sb_a');
    const f = t.file(path);
    await f.flush();
    t.put('sb_b');
    await f.flush();
    return { path, t, f };
  };
  const live = (t: Table) => [...t.recs.values()].map((c) => `${c.id}@${c.rv}`).sort();
  const ids = (path: string) =>
    readEngineState(path, silentLogger)
      .claims.map((c) => `${c.id}@${c.rv}`)
      .sort();

  it('a claim change appends one line, not a new snapshot, and a restart reads the same table back', async () => {
    const path = await fresh();
    const t = new Table();
    for (let i = 0; i < 100; i++) t.put(`sb_${i}`);
    const f = t.file(path);
    await f.flush();
    assert.deepEqual(f.stats, { snapshots: 1, appends: 0 });
    const snapshot = readFileSync(path, 'utf8');

    t.put('sb_100'); // a new claim
    t.put('sb_5', { hibernated: true }); // a changed one
    t.recs.delete('sb_7'); // a release
    await f.flush();
    assert.deepEqual(f.stats, { snapshots: 1, appends: 1 }, 'one append for the three changes');
    assert.equal(readFileSync(path, 'utf8'), snapshot, 'the snapshot is not rewritten');
    const [journal] = journals(path);
    const lines = readFileSync(join(path, '..', journal!), 'utf8')
      .trim()
      .split('\n');
    assert.equal(lines.length, 3, lines.join('\n'));
    assert.deepEqual(ids(path), live(t));
    assert.equal(readEngineState(path, silentLogger).claims.find((c) => c.id === 'sb_5')!.hibernated, true);

    await f.flush();
    assert.deepEqual(f.stats, { snapshots: 1, appends: 1 }, 'nothing changed: nothing written');

    // The coalesced background write takes the same path.
    t.put('sb_101');
    f.schedule();
    await eventually(async () => ids(path), { until: (x) => x.includes(`sb_101@${t.recs.get('sb_101')!.rv}`) });
    assert.deepEqual(f.stats, { snapshots: 1, appends: 2 });

    // A restarted daemon: it reads the table, and its first write is a snapshot that retires the journal.
    const again = t.file(path);
    assert.equal(again.read().claims.length, t.recs.size);
    await again.flush();
    assert.equal(again.stats.snapshots, 1);
    assert.equal(journals(path).length, 0, `old journals removed: ${journals(path).join(', ')}`);
    assert.deepEqual(ids(path), live(t));
  });

  it('a change of the warm targets writes a snapshot and drops the previous journal', async () => {
    const { path, t, f } = await snapshotThenAppend();
    assert.equal(journals(path).length, 1);
    t.targets = [{ key, warm: 5 }];
    await f.flush();
    assert.deepEqual(f.stats, { snapshots: 2, appends: 1 });
    assert.equal(journals(path).length, 0);
    const saved = readEngineState(path, silentLogger);
    assert.equal(saved.targets[0]!.warm, 5);
    assert.deepEqual(saved.claims.map((c) => c.id).sort(), ['sb_a', 'sb_b']);
  });

  it('compacts the journal once it outgrows max(1 MiB, 2 x the snapshot)', async () => {
    const path = await fresh();
    const t = new Table();
    const object = { metadata: { name: 'x', annotations: { big: 'y'.repeat(20_000) } } };
    for (let i = 0; i < 4; i++) t.put(`sb_${i}`, { object });
    const f = t.file(path);
    await f.flush();
    // ~20 KB per line: 1 MiB of journal after ~53 renewals of the same claim.
    for (let i = 0; i < 80; i++) {
      t.put('sb_0');
      await f.flush();
    }
    assert.equal(f.stats.snapshots, 2, JSON.stringify(f.stats));
    const [journal] = journals(path);
    assert.ok(statSync(join(path, '..', journal!)).size < 1 << 20);
    assert.deepEqual(ids(path), live(t));
  });

  it('skips a cut-off last line; a corrupt line before the last is an error naming the file', async () => {
    const { path } = await snapshotThenAppend();
    const journal = join(path, '..', journals(path)[0]!);
    appendFileSync(journal, '{"put":{"id":"sb_c","tok');
    assert.deepEqual(
      readEngineState(path, silentLogger)
        .claims.map((c) => c.id)
        .sort(),
      ['sb_a', 'sb_b'],
    );
    writeFileSync(journal, `{"put":{"id":"sb_c"\n${readFileSync(journal, 'utf8')}`);
    assert.throws(
      () => readEngineState(path, silentLogger),
      (err: Error) => /state\.journal\.\d+ line 1 is not valid JSON/.test(err.message),
    );
    assert.ok(existsSync(path));
  });
});
