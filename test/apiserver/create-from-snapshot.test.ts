/**
 * A Sandbox created from a snapshot (src/apiserver/sandboxes/create.ts) with the holder its caller found: the e2b API
 * asks the nodes for the snapshot before it writes the Sandbox, and passes what it found so the nodes are not asked
 * again. The passed holder is held to the same rule as one create finds itself (another namespace's checkpoint, a
 * node not synced, or another snapshot id mean asking the nodes). The nodes here are a recording fake, since what is
 * judged is which requests create makes; the whole path on real nodes is test/aggregated/e2b-sdk.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CocoonAnnotationKeys } from '../../src/api/index.js';
import type { CheckpointRow, HeldCheckpoint } from '../../src/apiserver/sandboxes/checkpoints.js';
import { SandboxCreator } from '../../src/apiserver/sandboxes/create.js';
import { EventLog } from '../../src/apiserver/sandboxes/event-log.js';
import type { Fleet } from '../../src/apiserver/sandboxes/fleet.js';
import type { SandboxdClient } from '../../src/apiserver/sandboxes/sandboxd-client.js';
import { SandboxStore } from '../../src/apiserver/sandboxes/store.js';
import { StatusFailure } from '../../src/apiserver/status.js';
import { silentLogger } from '../../src/log/logger.js';

const KEY = { template: 'sandbox/minimal', net: 'none', size: 'small' };
const NODE = 'node-1';
const ADDRESS = '127.0.0.1:1';
const ck = (claimRef: string, id = 'ck_1'): CheckpointRow => ({
  id,
  sandbox_id: 'sb_parent',
  claim_ref: claimRef,
  created_at: '2026-12-01T00:00:00.000Z',
  key: KEY,
});

function setup(held: CheckpointRow[], synced = true) {
  const calls: string[] = [];
  let n = 0;
  const client = {
    call: async (_node: string, _address: string, method: string, path: string, body?: { object?: unknown }) => {
      calls.push(`${method} ${path}`);
      if (method === 'GET' && path === '/v1/checkpoints') return { checkpoints: held };
      if (method === 'POST' && path.endsWith('/claim')) {
        const id = `sb_${++n}`;
        return {
          id,
          token: 'tok',
          deadline: '2030-01-01T00:00:00.000Z',
          owner_addr: ADDRESS,
          sandbox: {
            id,
            key: KEY,
            deadline: '2030-01-01T00:00:00.000Z',
            claimed_at: '2026-12-01T00:00:00.000Z',
            hibernated: false,
            rv: n,
            object: body?.object,
          },
        };
      }
      throw new Error(`unexpected ${method} ${path}`);
    },
  } as unknown as SandboxdClient;
  const fleet = {
    nodeNames: () => [NODE],
    address: (node: string) => (node === NODE ? ADDRESS : undefined),
    isSynced: () => synced,
  } as unknown as Fleet;
  const store = new SandboxStore(silentLogger, new EventLog(8));
  const creator = new SandboxCreator(store, fleet, client, { phase: () => 'active' }, silentLogger);
  const create = (name: string, snapshotHolder?: HeldCheckpoint) =>
    creator.create({
      namespace: 'team-a',
      body: {
        apiVersion: 'agents.x-k8s.io/v1beta1',
        kind: 'Sandbox',
        metadata: { name, annotations: { [CocoonAnnotationKeys.snapshot]: 'ck_1' } },
        spec: { podTemplate: { spec: { containers: [{ name: 'c', image: KEY.template }] } } },
      },
      dryRun: false,
      fieldValidation: 'Strict',
      warnings: [],
      ...(snapshotHolder ? { snapshotHolder } : {}),
    });
  return { calls, create };
}

const holder = (row: CheckpointRow, node = NODE): HeldCheckpoint => ({ node, address: ADDRESS, ck: row });

describe('create from a snapshot with the holder the caller found', () => {
  it("claims on the holder's node without asking the nodes again", async () => {
    const { calls, create } = setup([ck('team-a/parent')]);
    const created = await create('a', holder(ck('team-a/parent')));
    assert.equal(created.entry?.node, NODE);
    assert.deepEqual(calls, ['POST /v1/checkpoints/ck_1/claim']);
  });

  it('without a holder, asks the nodes first', async () => {
    const { calls, create } = setup([ck('team-a/parent')]);
    await create('a');
    assert.deepEqual(calls, ['GET /v1/checkpoints', 'POST /v1/checkpoints/ck_1/claim']);
  });

  it("ignores a holder of another namespace's checkpoint, and finds none of this namespace's", async () => {
    const { calls, create } = setup([ck('team-b/parent')]);
    await assert.rejects(create('a', holder(ck('team-b/parent'))), (err: unknown) => {
      assert.ok(err instanceof StatusFailure);
      assert.equal(err.status.code, 422);
      assert.match(err.status.message, /snapshot "ck_1" is on no reachable node/);
      return true;
    });
    assert.deepEqual(calls, ['GET /v1/checkpoints']);
  });

  it('ignores a holder of another snapshot id, or on a node that is not synced', async () => {
    const other = setup([ck('team-a/parent')]);
    await other.create('a', holder(ck('team-a/parent', 'ck_2')));
    assert.deepEqual(other.calls, ['GET /v1/checkpoints', 'POST /v1/checkpoints/ck_1/claim']);
    const unsynced = setup([ck('team-a/parent')], false);
    await assert.rejects(
      unsynced.create('a', holder(ck('team-a/parent'))),
      (err: unknown) => err instanceof StatusFailure && err.status.code === 422,
    );
    assert.deepEqual(unsynced.calls, [], 'a node that is not synced is neither used nor asked');
  });
});
