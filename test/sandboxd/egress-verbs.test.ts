/**
 * Every verb on the egress lane (issue 30: a networked VM's TAP lives in its own network namespace and moves with the
 * VM like any device, so nothing is refused for being networked), through the node's HTTP API over the simulated
 * engine (src/vmm/sim-driver.ts): a claim asking for the lease-end hibernate, pause and resume, hibernate and wake,
 * fork, checkpoint and a claim from it, promote; and the lease-end hibernate keeps a networked sandbox like any other.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { NodeEngine } from '../../src/sandboxd/engine.js';
import { eventually } from '../support/eventually.js';
import { call } from '../support/sandboxd-daemon.js';
import { startSimNode, type SimNode } from '../support/sim-node.js';

const ROOT = 'root-token-for-egress-verb-tests';
const EGRESS = { template: 'sandbox/minimal', net: 'egress', size: 'small' } as const;

describe('every verb on the egress lane (sim engine)', () => {
  let node: SimNode;
  let engine: NodeEngine;
  let base: string;

  before(async () => {
    node = await startSimNode('sbx-egress-verbs-', ROOT);
    ({ engine, base } = node);
  });

  after(() => node?.close());

  /** A root POST that must answer `status`; its JSON body. */
  const ok = async (path: string, body: unknown, status = 200) => {
    const r = await call(base, 'POST', path, body, ROOT);
    assert.equal(r.status, status, `${path}: ${JSON.stringify(r.json)}`);
    return r.json;
  };

  it('pauses, hibernates, forks, checkpoints, claims the checkpoint and promotes a networked sandbox', async () => {
    const claim = await ok('/v1/claim', { ...EGRESS, ttl_seconds: 60, claim_ref: 'ns/eg' });
    const id = claim.id as string;
    assert.equal(engine.vm(id).record.network, 'egress', 'a networked VM');

    await ok(`/v1/sandboxes/${id}/pause`, {});
    assert.equal(engine.vm(id).state, 'paused');
    await ok(`/v1/sandboxes/${id}/resume`, {});
    await ok(`/v1/sandboxes/${id}/hibernate`, {}, 204);
    assert.equal(engine.vm(id).state, 'hibernated');
    await ok(`/v1/sandboxes/${id}/wake`, {}, 204);
    assert.equal(engine.vm(id).state, 'running');

    const fork = await ok(`/v1/sandboxes/${id}/fork`, { count: 2 });
    const children = fork.children as Array<{ id: string }>;
    assert.equal(children.length, 2);
    for (const c of children)
      assert.equal(engine.get(c.id)?.key.net, 'egress', 'a fork of a networked VM is networked');

    const ck = (await ok(`/v1/sandboxes/${id}/checkpoint`, { name: 'eg-ck' })).checkpoint as { id: string };
    const clone = await ok(`/v1/checkpoints/${ck.id}/claim`, { ttl_seconds: 60 });
    assert.equal(engine.get(clone.id as string)?.key.net, 'egress', 'a clone of a networked checkpoint is networked');

    const promoted = await ok(`/v1/sandboxes/${id}/promote`, { template: 'egproj:v1' });
    assert.equal((promoted.key as { net: string }).net, 'egress');
  });

  it('claims with on_expiry=hibernate, hibernates at the end of the lease and keeps it for the longest lease', async () => {
    const { id } = await ok('/v1/claim', { ...EGRESS, on_expiry: 'hibernate', ttl_seconds: 1, claim_ref: 'ns/lease' });
    assert.equal(engine.get(id as string)?.onExpiry, 'hibernate');
    await eventually(() => engine.get(id as string)?.hibernated, { until: (h) => h === true, timeoutMs: 6000 });
    const left = Date.parse(engine.get(id as string)!.deadline) - Date.now();
    assert.ok(left > 86_000_000, `kept ~24 h after hibernating (${left} ms left)`);
    assert.equal(engine.counters.expiryFailures, 0);
  });
});
