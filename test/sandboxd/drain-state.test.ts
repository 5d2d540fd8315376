/**
 * The drain's state file (`<data-dir>/drain.json`, src/sandboxd/drain.ts) over the simulated engine (no VM): the
 * operator's drain comes back after a restart with its start time, and a file that is not what the drain writes
 * (hostile or damaged) is read as "not draining" instead of stopping the daemon's start.
 *
 *   node --import tsx --test test/sandboxd/drain-state.test.ts
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { SandboxError } from '../../src/errors.js';
import { silentLogger } from '../../src/log/logger.js';
import { API_REASON, NodeDrain } from '../../src/sandboxd/drain.js';
import type { NodeEngine } from '../../src/sandboxd/engine.js';
import { simNodeEngine } from '../support/sim-node.js';

const KEY = { template: 'sandbox/minimal', net: 'none', size: 'small' } as const;

async function withNode(
  file: string | undefined,
  check: (drain: NodeDrain, engine: NodeEngine) => Promise<void>,
): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'drain-state-'));
  const { engine } = simNodeEngine(dir);
  try {
    await engine.start();
    if (file !== undefined) await writeFile(join(dir, 'drain.json'), file);
    const drain = new NodeDrain({ engine, dataDir: dir, logger: silentLogger });
    drain.restore();
    await check(drain, engine);
    await drain.close();
  } finally {
    await engine.close({ destroyVms: true });
    await rm(dir, { recursive: true, force: true });
  }
}

describe('the drain state file', () => {
  it('brings the operator drain back after a restart, refusing claims', async () => {
    await withNode(JSON.stringify({ api: '2026-01-02T03:04:05.000Z', wake: [] }), async (drain) => {
      assert.equal(drain.active, true);
      assert.equal(drain.status().since, '2026-01-02T03:04:05.000Z');
      assert.deepEqual(drain.status().reasons, [API_REASON]);
      assert.equal(drain.stop(API_REASON), undefined, 'and DELETE /v1/drain ends it');
    });
  });

  for (const [what, text] of [
    ['not JSON', '{"api": '],
    ['null', 'null'],
    ['an array', '[1, 2]'],
    ['fields of the wrong type', '{"api": 5, "wake": "sb_x"}'],
    ['ids of the wrong type', '{"wake": [1, {"a": 2}, null]}'],
  ] as const)
    it(`reads ${what} as not draining, and the node takes claims`, async () => {
      await withNode(text, async (drain) => {
        assert.equal(drain.active, false);
      });
    });

  it('a drain started and ended takes claims again; started, refuses them', async () => {
    await withNode(undefined, async (drain, engine) => {
      drain.start(API_REASON);
      await assert.rejects(
        engine.claim({ key: KEY, ttlSeconds: 60 }),
        (err: unknown) => err instanceof SandboxError && err.code === 'sandboxd.draining',
      );
      drain.stop(API_REASON);
      const rec = await engine.claim({ key: KEY, ttlSeconds: 60 });
      await engine.release(rec.id);
    });
  });
});
