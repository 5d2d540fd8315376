/**
 * A hibernated Sandbox whose own node is full (it runs --max-claims sandboxes: 429 `sandboxd.at-capacity`) resumes
 * on a node holding a copy of its hibernation record (docs/placement.md "Resume anywhere"), by the resume verb and
 * by an exec of an idle-suspended one; the Event says the node was full, and the old claim is released. Where no
 * other node holds the record, the caller gets the node's 429, not a 503. Over stand-in nodes (the nodes' half of
 * a move is real in test/sandboxd/resume-anywhere.test.ts).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { SandboxActions } from '../../src/apiserver/sandboxes/actions.js';
import type { NodeRow } from '../../src/apiserver/sandboxes/entry.js';
import { EventLog } from '../../src/apiserver/sandboxes/event-log.js';
import { NodeHttpError, type SandboxdClient } from '../../src/apiserver/sandboxes/sandboxd-client.js';
import type { SandboxVerbEvents, VerbOutcome } from '../../src/apiserver/sandboxes/verb-events.js';
import { StatusFailure } from '../../src/apiserver/status.js';
import { SandboxStore } from '../../src/apiserver/sandboxes/store.js';
import { silentLogger } from '../../src/log/logger.js';
import { nodeRow, sandboxObject } from '../support/node-rows.js';

const object = sandboxObject('team', 'agent');
const row = (id: string, extra: Partial<NodeRow>): NodeRow =>
  nodeRow(id, object, { claim_ref: 'team/agent', ...extra });
const FULL = new NodeHttpError('node-a', 429, 'node node-a runs 2 sandboxes already', 'sandboxd.at-capacity');

/** node-a holds the sandbox and is full; node-b holds (or not) a copy of its record. */
function world(opts: { phase: string; copyOnB: boolean }) {
  const store = new SandboxStore(silentLogger, new EventLog(8));
  store.upsert(
    'node-a',
    '10.0.0.1:7777',
    row('sb_a', { hibernated: true, phase: opts.phase, hibernation_checkpoint: 'ck_1' }),
  );
  const calls: string[] = [];
  const released: string[] = [];
  const client = {
    call: async (node: string, _address: string, method: string, path: string, body?: unknown) => {
      calls.push(`${node} ${method} ${path}`);
      if (node === 'node-a') throw FULL;
      if (method === 'HEAD') {
        if (!opts.copyOnB) throw new NodeHttpError(node, 404, 'no message');
        return undefined;
      }
      if (path === '/v1/checkpoints/ck_1/claim') {
        const b = body as { resumed_from: { node: string; claim_id: string }; claim_ref: string };
        return { sandbox: row('sb_b', { rv: 2, resumed_from: b.resumed_from, claim_ref: b.claim_ref }) };
      }
      if (path === '/v1/sandboxes/sb_b/exec') return { exit_code: 0, stdout: 'ran on b\n', stderr: '' };
      throw new Error(`unexpected ${node} ${method} ${path}`);
    },
    release: async (node: string, _address: string, id: string) => void released.push(`${node}/${id}`),
  } as unknown as SandboxdClient;
  const outcomes: VerbOutcome[] = [];
  const events = {
    succeeded: (_e: unknown, o: VerbOutcome) => void outcomes.push(o),
    failed: () => undefined,
  } as unknown as SandboxVerbEvents;
  const fleet = {
    nodeNames: () => ['node-a', 'node-b'],
    address: (n: string) => (n === 'node-a' ? '10.0.0.1:7777' : '10.0.0.2:7777'),
    isSynced: () => true,
    isDraining: () => false,
  };
  return { store, calls, released, outcomes, actions: new SandboxActions(store, client, events, fleet) };
}

describe('resume anywhere: a hibernated Sandbox whose node is full', () => {
  it('the resume verb moves it to a node holding its record; the Event says the node was full', async () => {
    const w = world({ phase: 'Hibernated', copyOnB: true });
    await w.actions.act('team', 'agent', 'resume', {});
    assert.equal(w.store.get('team/agent')?.node, 'node-b');
    assert.equal(w.store.get('team/agent')?.claimId, 'sb_b');
    const moved = w.outcomes[0] as { moved?: { from: string; to: string; why: string } };
    assert.deepEqual(
      { from: moved.moved?.from, to: moved.moved?.to, why: moved.moved?.why },
      { from: 'node-a', to: 'node-b', why: 'full' },
    );
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(w.released, ['node-a/sb_a'], 'the old claim is released on its (live) node');
  });

  it('an exec of an idle-suspended one wakes it where its record is and runs the command there', async () => {
    const w = world({ phase: 'Suspended', copyOnB: true });
    const out = (await w.actions.act('team', 'agent', 'exec', { command: ['true'] })) as { stdout: string };
    assert.equal(out.stdout, 'ran on b\n');
    assert.ok(w.calls.includes('node-a POST /v1/sandboxes/sb_a/exec'), 'its own node was asked first');
    assert.equal(w.store.get('team/agent')?.node, 'node-b');
    const moved = w.outcomes[0] as { verb: string; moved?: { why: string } };
    assert.equal(moved.verb, 'resume', 'the move is recorded as a resume (SandboxResumedOnAnotherNode)');
    assert.equal(moved.moved?.why, 'full');
  });

  it('with no copy elsewhere the caller gets the full node’s 429 (retry later), and nothing moves', async () => {
    const w = world({ phase: 'Hibernated', copyOnB: false });
    await assert.rejects(
      w.actions.act('team', 'agent', 'resume', {}),
      (err: unknown) => err instanceof StatusFailure && err.status.code === 429 && /runs 2 sandboxes/.test(err.message),
    );
    assert.equal(w.store.get('team/agent')?.node, 'node-a');
    assert.deepEqual(w.released, []);
  });

  it('a refusal that is not about room (a 409) is passed on as it is, without looking for a copy', async () => {
    const w = world({ phase: 'Hibernated', copyOnB: true });
    const conflict = new NodeHttpError('node-a', 409, 'the sandbox is being released', 'sandboxd.conflict');
    const actions = new SandboxActions(
      w.store,
      {
        call: async (node: string, _a: string, method: string, path: string) => {
          w.calls.push(`${node} ${method} ${path}`);
          throw conflict;
        },
      } as unknown as SandboxdClient,
      undefined,
      { nodeNames: () => ['node-a', 'node-b'], address: () => 'x', isSynced: () => true, isDraining: () => false },
    );
    await assert.rejects(
      actions.act('team', 'agent', 'resume', {}),
      (err: unknown) => err instanceof StatusFailure && err.status.code === 409,
    );
    assert.ok(!w.calls.some((c) => c.includes('HEAD')), w.calls.join('; '));
  });
});
