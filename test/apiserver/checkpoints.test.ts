/**
 * Whose checkpoint it is (src/apiserver/sandboxes/checkpoints.ts): the one rule sandbox-apiserver's create from a
 * snapshot and the e2b snapshot list, create and delete share. The cross-namespace cases on real nodes are in
 * test/aggregated/lifecycle.test.ts; here the legacy record, which today's nodes no longer write.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { checkpointNamespace, type CheckpointRow } from '../../src/apiserver/sandboxes/checkpoints.js';
import { EventLog } from '../../src/apiserver/sandboxes/event-log.js';
import { SandboxStore } from '../../src/apiserver/sandboxes/store.js';
import { silentLogger } from '../../src/log/logger.js';

const ck = (extra: Partial<CheckpointRow> = {}): CheckpointRow => ({
  id: 'ck_1',
  sandbox_id: 'sb_1',
  created_at: '2026-12-01T00:00:00.000Z',
  key: { template: 'sandbox/minimal', net: 'none', size: 'small' },
  ...extra,
});

describe('checkpointNamespace', () => {
  const store = new SandboxStore(silentLogger, new EventLog(8));
  const owner = store.upsert('node-1', '127.0.0.1:1', {
    id: 'sb_1',
    key: { template: 'sandbox/minimal', net: 'none', size: 'small' },
    deadline: '2030-01-01T00:00:00.000Z',
    claimed_at: '2026-12-01T00:00:00.000Z',
    hibernated: false,
    rv: 1,
    object: {
      metadata: { name: 'a', namespace: 'team-a', uid: 'uid-a', creationTimestamp: '2026-12-01T00:00:00Z' },
      spec: { podTemplate: { spec: { containers: [{ name: 'c', image: 'sandbox/minimal' }] } } },
    },
  });

  it('is the namespace of the claim_ref the node recorded, whatever sandbox lives now', () => {
    assert.ok(owner);
    assert.equal(checkpointNamespace(ck({ claim_ref: 'team-b/x' }), undefined), 'team-b');
    assert.equal(checkpointNamespace(ck({ claim_ref: 'team-b/x' }), owner), 'team-b');
  });

  it("for a record without claim_ref, is the live sandbox's namespace, and nobody's once it is gone", () => {
    assert.equal(checkpointNamespace(ck(), store.getByClaim('sb_1')), 'team-a');
    assert.equal(checkpointNamespace(ck({ sandbox_id: 'sb_gone' }), store.getByClaim('sb_gone')), undefined);
  });
});
