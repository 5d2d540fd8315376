/**
 * A Sandbox that resumed on another node from its hibernation record (docs/placement.md "Resume anywhere") moves in
 * the store: the new node's row, naming the claim it replaced (`resumed_from`), becomes the same object on the new
 * node in one MODIFIED; the old claim, when its node reports it again (back after the move, or feeds replayed after
 * a restart in either order), is never served again and is handed to `onStale` for release.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { NodeRow } from '../../src/apiserver/sandboxes/entry.js';
import { EventLog, type StoreEvent } from '../../src/apiserver/sandboxes/event-log.js';
import { SandboxStore } from '../../src/apiserver/sandboxes/store.js';
import { silentLogger } from '../../src/log/logger.js';
import { nodeRow, sandboxObject } from '../support/node-rows.js';

const object = sandboxObject('ns', 'agent', 'sandbox/minimal');
const row = (id: string, rv: number, extra: Partial<NodeRow> = {}): NodeRow =>
  nodeRow(id, object, { key: { template: 'sandbox/minimal', net: 'none', size: 'small' }, rv, ...extra });

function recording() {
  const store = new SandboxStore(silentLogger, new EventLog(16));
  const events: StoreEvent[] = [];
  const stale: string[] = [];
  store.log.subscribe({ deliver: (e) => events.push(e) });
  store.onStale = (node, _address, claimId) => stale.push(`${node}/${claimId}`);
  return { store, events, stale };
}

const hibernatedOnA = row('sb_a', 5, { hibernated: true, phase: 'Hibernated', hibernation_checkpoint: 'ck_1' });
const resumedOnB = row('sb_b', 9, { resumed_from: { node: 'node-a', claim_id: 'sb_a' }, from_checkpoint: 'ck_1' });

describe('a sandbox resumed on another node', () => {
  it('moves in one MODIFIED, and the old claim is superseded when its node reports it again', () => {
    const { store, events, stale } = recording();
    store.upsert('node-a', '10.0.0.1:7777', hibernatedOnA);
    assert.equal(store.get('ns/agent')?.hibernationCheckpoint, 'ck_1');
    const moved = store.upsert('node-b', '10.0.0.2:7777', resumedOnB);
    assert.equal(moved?.node, 'node-b');
    assert.equal(moved?.claimId, 'sb_b');
    assert.deepEqual(
      events.map((e) => `${e.type}:${e.next.node}`),
      ['ADDED:node-a', 'MODIFIED:node-b'],
    );
    assert.equal(store.getByClaim('sb_a'), undefined);
    assert.equal(store.countOnNode('node-a'), 0);
    // node-a comes back with the old claim: not served, released.
    assert.equal(store.upsert('node-a', '10.0.0.1:7777', { ...hibernatedOnA, rv: 6 }), undefined);
    assert.equal(store.get('ns/agent')?.node, 'node-b');
    assert.deepEqual(stale, ['node-a/sb_a']);
    assert.equal(events.length, 2, 'nothing published for the stale claim');
  });

  it('after a restart, the new claim wins whichever feed comes first', () => {
    const { store, events, stale } = recording();
    store.upsert('node-b', '10.0.0.2:7777', resumedOnB);
    assert.equal(store.upsert('node-a', '10.0.0.1:7777', hibernatedOnA), undefined);
    assert.equal(store.get('ns/agent')?.node, 'node-b');
    assert.deepEqual(stale, ['node-a/sb_a']);
    assert.deepEqual(
      events.map((e) => e.type),
      ['ADDED'],
    );
  });

  it('a second claim of the name that names no move is still not served', () => {
    const { store } = recording();
    store.upsert('node-a', '10.0.0.1:7777', hibernatedOnA);
    assert.equal(store.upsert('node-b', '10.0.0.2:7777', row('sb_c', 3)), undefined);
    assert.equal(store.get('ns/agent')?.claimId, 'sb_a');
  });
});
