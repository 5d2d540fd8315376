/**
 * The replacement Pod's lookup of its predecessor's hibernation record (src/sandboxd/placement/handoff.ts): held here
 * first (no peer asked), else the peers that list it by claim_ref (a peer that is down or answers garbage is
 * skipped), else none; a record held by peers only is pulled before it is claimed, and the claim names the claim it
 * replaces. Over a stand-in engine and peers; the whole hand-off on real nodes is vk-drain.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { silentLogger } from '../../src/log/logger.js';
import type { NodeEngine } from '../../src/sandboxd/engine.js';
import type { Healer } from '../../src/sandboxd/placement/heal.js';
import { RecordHandoff } from '../../src/sandboxd/placement/handoff.js';
import type { PeerClient } from '../../src/sandboxd/placement/peer-client.js';

const REF = 'team/agent';

function setup(opts: {
  local?: Array<{ id: string; kind?: string; claimRef?: string; sandboxId: string; origin?: string }>;
  peers: Record<string, unknown>;
}) {
  const asked: string[] = [];
  const pulled: Array<{ id: string; from: readonly string[] }> = [];
  const claimed: unknown[][] = [];
  const engine = {
    listCheckpoints: () => opts.local ?? [],
    claimCheckpoint: async (...args: unknown[]) => {
      claimed.push(args);
      return { id: 'sb_new' };
    },
  } as unknown as NodeEngine;
  const client = {
    json: async (peer: string, path: string) => {
      asked.push(`${peer} ${path}`);
      const a = opts.peers[peer];
      if (a instanceof Error) throw a;
      return a;
    },
  } as unknown as PeerClient;
  const puller = {
    heal: async (id: string, from: readonly string[]) => {
      pulled.push({ id, from });
      return { bytes: 1, ms: 1 };
    },
  } as unknown as Healer;
  const handoff = new RecordHandoff({
    engine,
    client,
    peers: () => ['10.0.0.1:1', ...Object.keys(opts.peers)],
    self: () => '10.0.0.1:1',
    puller,
    logger: silentLogger,
  });
  return { handoff, asked, pulled, claimed };
}

const listed = (rows: object[]) => ({ checkpoints: rows });

describe('hand-off lookup: a replacement Pod finds its predecessor’s hibernation record', () => {
  it('a record held here is found without asking a peer, and claimed without a pull', async () => {
    const w = setup({
      local: [
        { id: 'ck_fedcba9876543210', claimRef: REF, sandboxId: 'sb_x' }, // a snapshot of the same sandbox: not a record
        { id: 'ck_0123456789abcdef', kind: 'hibernation', claimRef: REF, sandboxId: 'sb_old', origin: 'node-0' },
      ],
      peers: { '10.0.0.2:1': listed([]) },
    });
    const found = await w.handoff.find(REF);
    assert.deepEqual(found, {
      id: 'ck_0123456789abcdef',
      claimRef: REF,
      sandboxId: 'sb_old',
      origin: 'node-0',
      holders: [],
    });
    assert.deepEqual(w.asked, []);
    await w.handoff.claim(found!, { ttlSeconds: 60 });
    assert.deepEqual(w.pulled, []);
    const args = w.claimed[0]!;
    assert.equal(args[0], 'ck_0123456789abcdef');
    assert.deepEqual(args[2], { claimRef: REF, object: undefined });
    assert.deepEqual(args[6], { node: 'node-0', claimId: 'sb_old' });
  });

  it('else the peers listing it are the holders (one asked per peer, never itself), and it is pulled from them', async () => {
    const row = { id: 'ck_0123456789abcdef', kind: 'hibernation', claim_ref: REF, sandbox_id: 'sb_old' };
    const w = setup({
      peers: {
        '10.0.0.2:1': listed([row]),
        '10.0.0.3:1': new Error('connect ECONNREFUSED'),
        '10.0.0.4:1': { checkpoints: 'not a list' },
        '10.0.0.5:1': listed([{ ...row, origin: 'node-2' }]),
        '10.0.0.6:1': listed([{ ...row, claim_ref: 'team/other' }]),
        '10.0.0.7:1': listed([{ ...row, id: '../../etc/passwd' }]), // a hostile peer's id is no record
      },
    });
    const found = await w.handoff.find(REF);
    assert.deepEqual(found, {
      id: 'ck_0123456789abcdef',
      claimRef: REF,
      sandboxId: 'sb_old',
      origin: 'node-2',
      holders: ['10.0.0.2:1', '10.0.0.5:1'],
    });
    assert.equal(w.asked.length, 6, w.asked.join('; '));
    assert.ok(w.asked.every((a) => a.endsWith('/v1/checkpoints?kind=hibernation&claim_ref=team%2Fagent')));
    await w.handoff.claim(found!, {});
    assert.deepEqual(w.pulled, [{ id: 'ck_0123456789abcdef', from: ['10.0.0.2:1', '10.0.0.5:1'] }]);
  });

  it('no record anywhere: none (the Pod gets a fresh VM)', async () => {
    const w = setup({ peers: { '10.0.0.2:1': listed([]), '10.0.0.3:1': new Error('timeout') } });
    assert.equal(await w.handoff.find(REF), undefined);
  });
});
