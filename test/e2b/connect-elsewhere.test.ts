/**
 * e2b `connect` of a sandbox whose node is gone (docs/placement.md "Resume anywhere"): it goes through the Sandbox's
 * resume verb, which resumes it on a node holding its hibernation record, and answers with the new node's entry and
 * envd token, with the lease renewed there. Over a stand-in storage and nodes; the move itself on real nodes is
 * test/sandboxd/resume-anywhere.test.ts, the store's part test/apiserver/store-move.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { envdAccessToken } from '../../src/api/envd.js';
import { SandboxOps } from '../../src/apiserver/e2b/sandbox-ops.js';
import type { NodeRow } from '../../src/apiserver/sandboxes/entry.js';
import { EventLog } from '../../src/apiserver/sandboxes/event-log.js';
import type { Fleet } from '../../src/apiserver/sandboxes/fleet.js';
import type { SandboxdClient } from '../../src/apiserver/sandboxes/sandboxd-client.js';
import type { SandboxStorage } from '../../src/apiserver/sandboxes/storage.js';
import { SandboxStore } from '../../src/apiserver/sandboxes/store.js';
import { silentLogger } from '../../src/log/logger.js';
import { nodeRow, sandboxObject } from '../support/node-rows.js';

const row = (id: string, extra: Partial<NodeRow>): NodeRow => nodeRow(id, sandboxObject('e2b', 'isbx1'), extra);

/**
 * e2b's operations over a store holding `first` on node-a, a resume verb that moves the sandbox to node-b (as
 * sandbox-apiserver's would), and nodes answering `answer` (each call recorded in `calls`).
 */
function connecting(first: NodeRow, answer: (node: string, method: string) => unknown) {
  const store = new SandboxStore(silentLogger, new EventLog(8));
  store.upsert('node-a', '10.0.0.1:7777', first);
  const acted: string[] = [];
  const calls: string[] = [];
  const moved = row('sb_b', { rv: 2, resumed_from: { node: 'node-a', claim_id: first.id } });
  const storage = {
    act: async (ns: string, name: string, sub: string) => {
      acted.push(`${ns}/${name}/${sub}`);
      store.upsert('node-b', '10.0.0.2:7777', moved);
      return {};
    },
  } as unknown as SandboxStorage;
  const client = {
    call: async (node: string, _address: string, method: string, path: string) => {
      calls.push(`${node} ${method} ${path}`);
      if (node === 'node-b') return method === 'GET' ? { ...moved, rv: 3, token: 'token-b' } : {};
      return answer(node, method);
    },
  } as unknown as SandboxdClient;
  const ops = new SandboxOps({
    storage,
    store,
    client,
    fleet: {} as Fleet,
    templates: new Map(),
    namespace: 'e2b',
    log: silentLogger,
  });
  return { store, acted, calls, ops };
}

describe('e2b connect when the sandbox’s node is gone', () => {
  it('resumes it elsewhere through the resume verb and answers with the new node’s token', async () => {
    const { store, acted, calls, ops } = connecting(
      row('sb_a', { hibernated: true, hibernation_checkpoint: 'ck_1' }),
      () => {
        throw new Error('node-a is gone');
      },
    );
    store.setNodeAvailable('node-a', false);
    const r = await ops.connect('isbx1', 600);
    assert.deepEqual(acted, ['e2b/isbx1/resume']);
    assert.equal(r.resumed, true);
    assert.equal(r.entry.node, 'node-b');
    assert.equal(r.envdToken, envdAccessToken('token-b'));
    assert.ok(!calls.some((c) => c.startsWith('node-a')), `nothing was asked of the dead node: ${calls.join('; ')}`);
    assert.ok(calls.includes('node-b POST /v1/sandboxes/sb_b/renew'), calls.join('; '));
  });

  it('resumes a hibernated sandbox through the resume verb on a live node too (which moves it when that node is full)', async () => {
    const hibernated = row('sb_a', { hibernated: true, hibernation_checkpoint: 'ck_1' });
    const { acted, calls, ops } = connecting(hibernated, (_node, method) =>
      method === 'GET' ? { ...hibernated, token: 'token-a' } : {},
    );
    const r = await ops.connect('isbx1', 600);
    assert.deepEqual(acted, ['e2b/isbx1/resume']);
    assert.equal(r.resumed, true);
    assert.equal(r.entry.node, 'node-b');
    assert.ok(!calls.includes('node-a POST /v1/sandboxes/sb_a/resume'), `the verb resumed it: ${calls.join('; ')}`);
    assert.equal(r.envdToken, envdAccessToken('token-b'));
  });
});
