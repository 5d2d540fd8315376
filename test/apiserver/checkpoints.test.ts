/**
 * Whose checkpoint it is (src/apiserver/sandboxes/checkpoints.ts): the one rule sandbox-apiserver's create from a
 * snapshot and the e2b snapshot list, create and delete share; and where its copies are, as SandboxSnapshot `copies`
 * and e2b's snapshot list show them (snapshotCopies; on real nodes: test/sandboxd/replicas.test.ts). The cross-namespace cases on real nodes are in
 * test/aggregated/lifecycle.test.ts; here the legacy record, which today's nodes no longer write.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  checkpointNamespace,
  nodeByAddress,
  snapshotCopies,
  type CheckpointRow,
} from '../../src/apiserver/sandboxes/checkpoints.js';
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

describe("snapshotCopies: a snapshot's copies from its holders' rows", () => {
  const fleet = {
    nodeNames: () => ['node-0', 'node-1', 'node-2'],
    address: (n: string) => (n === 'node-2' ? undefined : `10.0.0.1:${7000 + Number(n.slice(-1))}`),
  };
  const nodeAt = nodeByAddress(fleet);
  const copies = (nodes: string[], want: number, checked_at: string) => ({
    ck: ck({ copies: { nodes, want, checked_at } }),
  });

  it('is absent until a holder has counted', () => {
    assert.equal(snapshotCopies([], nodeAt), undefined);
    assert.equal(snapshotCopies([{ ck: ck() }, { ck: ck() }], nodeAt), undefined);
  });

  it("names the nodes by the fleet's addresses, keeps a stranger's address, and takes the newest count", () => {
    assert.equal(nodeAt('10.0.0.1:7001'), 'node-1');
    assert.equal(nodeAt('10.0.0.1:7002'), undefined, 'a node without an address names none');
    assert.deepEqual(
      snapshotCopies(
        [
          copies(['10.0.0.1:7000'], 2, '2026-12-01T00:00:05.000Z'),
          { ck: ck() },
          copies(['10.0.0.1:7001', '10.0.0.1:7000', '192.0.2.9:7000'], 2, '2026-12-01T00:00:09.000Z'),
        ],
        nodeAt,
      ),
      { count: 3, want: 2, nodes: ['192.0.2.9:7000', 'node-0', 'node-1'], checkedAt: '2026-12-01T00:00:09.000Z' },
    );
  });

  it("skips a row whose copies are not sandboxd's shape instead of showing them", () => {
    const bad: unknown[] = [
      null,
      'two',
      { nodes: 'x', want: 2, checked_at: '2026-12-01T00:00:00Z' },
      { nodes: [1], want: 2, checked_at: '2026-12-01T00:00:00Z' },
      { nodes: [''], want: 2, checked_at: '2026-12-01T00:00:00Z' },
      { nodes: ['a'], want: 0, checked_at: '2026-12-01T00:00:00Z' },
      { nodes: ['a'], want: 1.5, checked_at: '2026-12-01T00:00:00Z' },
      { nodes: ['a'], want: 2, checked_at: 'yesterday' },
      { nodes: Array.from({ length: 5000 }, (_, i) => `h:${i}`), want: 2, checked_at: '2026-12-01T00:00:00Z' },
    ];
    for (const c of bad)
      assert.equal(
        snapshotCopies([{ ck: ck({ copies: c as CheckpointRow['copies'] }) }], nodeAt),
        undefined,
        JSON.stringify(c)?.slice(0, 80),
      );
    // A good row beside a bad one is shown.
    assert.equal(
      snapshotCopies(
        [
          { ck: ck({ copies: bad[2] as CheckpointRow['copies'] }) },
          copies(['10.0.0.1:7000'], 1, '2026-12-01T00:00:00Z'),
        ],
        nodeAt,
      )?.count,
      1,
    );
  });
});
