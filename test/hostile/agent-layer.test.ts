/**
 * A filesystem pause's save against a hostile guest (test/hostile/agent-fake-guest.ts): a guest that streams its
 * "writable layer" for ever, as fast as its credit allows, is cut at the node's cap: the save fails with
 * `sandboxd.layer-too-large` (docs/sandboxd-api.md "Filesystem pause"), the guest is told to cancel, nothing of the
 * stream stays on disk, the host does not crash, and the connection keeps working. A guest without the feature is
 * refused before anything is sent.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { SandboxError } from '../../src/errors.js';
import { AgentClient, FrameType } from '../../src/guest/index.js';
import { STREAM_WINDOW } from '../../src/guest/flow.js';
import { saveLayer } from '../../src/guest/agent-layer.js';
import { crashesDuring, FakeGuest, type FakeGuestOptions } from './agent-fake-guest.js';

const guests: FakeGuest[] = [];
const dir = mkdtempSync(join(tmpdir(), 'sbx-hostile-layer-'));
after(async () => {
  await Promise.all(guests.map((g) => g.close()));
  rmSync(dir, { recursive: true, force: true });
});

async function guest(opts: FakeGuestOptions): Promise<FakeGuest> {
  const g = await FakeGuest.start(opts);
  guests.push(g);
  return g;
}

const isCode = (code: string) => (e: unknown) => e instanceof SandboxError && e.code === code;

describe('layer.save from a hostile guest', () => {
  it('an endless stream is cut at the cap, removed from disk, and the guest told to cancel', async () => {
    let cancelled = false;
    const chunk = Buffer.alloc(STREAM_WINDOW / 4, 0x41);
    const g = await guest({
      features: ['flow', 'layer'],
      script: (req, s) => {
        if (req.op === 'cancel') {
          cancelled = true;
          return s.ok(req.id);
        }
        if (req.op === 'ping') return s.ok(req.id);
        if (req.op !== 'layer.save') return;
        // Everything the credit allows, and again at every grant: a layer with no end.
        const id = req.id;
        let credit = 0;
        const pump = () => {
          while (!cancelled && credit >= chunk.length) {
            credit -= chunk.length;
            s.frame(FrameType.Out, id, chunk);
          }
        };
        s.onGrant = (gid, n) => {
          if (gid !== id) return;
          credit += n;
          pump();
        };
        credit = s.granted.get(id) ?? 0;
        // The initial window is implicit (docs/agent-protocol.md "Flow control"): granted before any WINDOW.
        credit += STREAM_WINDOW;
        pump();
      },
    });
    const c = await AgentClient.connect(g.path, { connectTimeoutMs: 5000 });
    const dest = join(dir, 'endless.tar');
    const crashes = await crashesDuring(async () => {
      await assert.rejects(saveLayer(c, dest, { maxBytes: 8 << 20 }), isCode('sandboxd.layer-too-large'));
    });
    assert.deepEqual(crashes, []);
    assert.equal(existsSync(dest), false, 'the partial layer is removed');
    assert.equal(cancelled, true, 'the guest was told to stop');
    await c.ping(5000); // the connection still serves the sandbox
    c.close();
  });

  it('a guest without the layer feature is refused before any request', async () => {
    const g = await guest({ features: ['flow'] });
    const c = await AgentClient.connect(g.path, { connectTimeoutMs: 5000 });
    await assert.rejects(saveLayer(c, join(dir, 'none.tar'), { maxBytes: 1 << 20 }), isCode('agent.version'));
    assert.equal(
      g.requests.some((r) => r.op === 'layer.save'),
      false,
    );
    c.close();
  });
});
