import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { KubeClient, NodeInventories } from '../../src/kube/index.js';
import { NodeEngine } from '../../src/sandboxd/engine.js';
import { InventoryPublisher } from '../../src/sandboxd/inventory.js';
import { getTestCluster, type TestCluster } from '../support/cluster.js';
import { eventually } from '../support/eventually.js';

interface Inventory {
  metadata: { name: string; managedFields?: Array<{ manager: string }> };
  node: string;
  address: string;
  entries?: Array<{ name: string; id: string; phase: string; claimRef?: string; deadline?: string }>;
  pools?: Array<{ template: string; net: string; size: string; warm: number; target: number }>;
}

describe('NodeInventory publisher (server-side apply, field manager sandboxd)', () => {
  let cluster: TestCluster;
  let dir: string;
  let engine: NodeEngine;
  let client: KubeClient;
  const node = `inv-${randomBytes(3).toString('hex')}`;

  before(async () => {
    cluster = await getTestCluster();
    dir = await mkdtemp(join(tmpdir(), 'sbxd-inv-'));
    engine = new NodeEngine({ dataDir: dir, nodeName: node, advertiseAddr: `${cluster.hostAddress}:7777` });
    await engine.start();
    client = await KubeClient.fromKubeconfig(cluster.kubeconfigPath);
  });
  after(async () => {
    await engine?.close({ destroyVms: true });
    await client?.delete(NodeInventories, undefined, node).catch(() => {});
    client?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('publishes pools and claimed sandboxes, skips unchanged state, and recreates a deleted object', async () => {
    const publisher = new InventoryPublisher({
      client,
      engine,
      nodeName: node,
      address: `${cluster.hostAddress}:7777`,
    });
    engine.setTargets([{ key: { template: 'sandbox/minimal', net: 'none', size: 'small' }, warm: 1 }]);
    await eventually(() => engine.warmCount({ template: 'sandbox/minimal', net: 'none', size: 'small' }), {
      timeoutMs: 120_000,
      until: (n) => n === 1,
    });
    const rec = await engine.claim({
      key: { template: 'sandbox/minimal', net: 'none', size: 'small' },
      claimRef: 'team-a/agent-1',
      ttlSeconds: 120,
    });
    // Let the pool refill first, so the state is stable between the publishes below.
    await eventually(() => engine.poolStatus()[0], {
      timeoutMs: 120_000,
      until: (p) => p?.warm === 1 && p.refilling === 0,
    });

    assert.equal(await publisher.publishOnce(), true);
    const inv = JSON.parse(
      await cluster.kubectl(['get', 'nodeinventory', node, '-o', 'json', '--show-managed-fields']),
    ) as Inventory;
    assert.equal(inv.node, node);
    assert.equal(inv.address, `${cluster.hostAddress}:7777`);
    assert.deepEqual(
      inv.entries?.map((e) => ({ name: e.name, id: e.id, phase: e.phase, claimRef: e.claimRef })),
      [{ name: 'team-a/agent-1', id: rec.id, phase: 'Running', claimRef: 'team-a/agent-1' }],
    );
    assert.ok(inv.entries?.[0]?.deadline?.endsWith('Z'));
    assert.equal(inv.pools?.[0]?.template, 'sandbox/minimal');
    assert.equal(inv.pools?.[0]?.target, 1);
    assert.ok(
      inv.metadata.managedFields?.some((f) => f.manager === 'sandboxd'),
      'written by field manager sandboxd',
    );

    // Nothing changed: no write.
    assert.equal(await publisher.publishOnce(), false);
    assert.equal(publisher.stats.publishes, 1);

    // Release -> the next publish drops the entry; a deleted object comes back on a forced publish.
    await engine.release(rec.id);
    await publisher.publishOnce();
    await client.delete(NodeInventories, undefined, node);
    await publisher.publishOnce(true);
    const again = JSON.parse(await cluster.kubectl(['get', 'nodeinventory', node, '-o', 'json'])) as Inventory;
    assert.deepEqual(again.entries ?? [], []);
  });
});
