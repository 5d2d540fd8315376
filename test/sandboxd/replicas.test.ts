/**
 * Checkpoint replicas (docs/placement.md "Replicas", issue 33 item 1) on a private aggregated platform of three
 * sandboxd nodes with real microVMs (its own control plane: it kills a node, which no other file may share): a
 * snapshot taken through the Kubernetes API is on two nodes soon after, as SandboxSnapshot `nodeNames` and the
 * origin's `GET /v1/checkpoints` `copies` say; the origin's sandboxd is then killed with SIGKILL and its data dir
 * deleted, and a Sandbox created from the snapshot starts on another node with the files written before it. The
 * survivors copy it again until two nodes hold it. Where the copies are shows in SandboxSnapshot `copies` (by node
 * name, count == want once replicated; recounted without the lost node) and each node's NodeInventory `checkpoints`.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import type { Platform } from '../../src/cli/platform.js';
import { sandboxManifest } from '../support/aggregated.js';
import { eventually } from '../support/eventually.js';
import { call } from '../support/sandboxd-daemon.js';
import { BASE, GROUP, startThreeNodes, type ThreeNodes } from '../support/three-nodes.js';

const SNAPSHOT_ANNOTATION = 'sandbox.cocoonstack.io/snapshot';
/** The stated bound: a snapshot of a small VM (256 MiB of RAM, mostly holes) is on two nodes within this. */
const REPLICATED_WITHIN_MS = 120_000;

describe('checkpoint replicas on three nodes (real microVMs, aggregated layout)', () => {
  let nodes: ThreeNodes;
  let platform: Platform;
  let kubectl: ThreeNodes['kubectl'];
  const ns = `replicas-${randomBytes(3).toString('hex')}`;

  const sh = (name: string, script: string) => nodes.sh(ns, name, script);
  const create = async (manifest: object) => {
    for (let i = 0; ; i++) {
      try {
        return JSON.parse(await kubectl(['create', '-n', ns, '-o', 'json', '-f', '-'], JSON.stringify(manifest)));
      } catch (err) {
        // One warm VM per node: a create right after another may find the pool refilling.
        if (!/no warm sandbox/.test(String(err)) || i > 600) throw err;
        await new Promise((r) => setTimeout(r, 200));
      }
    }
  };
  const snapshotNodes = async (id: string): Promise<string[]> => (await snapshotObject(id)).nodeNames;
  const snapshotObject = async (id: string) =>
    JSON.parse(await kubectl(['get', 'sandboxsnapshot', id, '-n', ns, '-o', 'json'])) as {
      nodeNames: string[];
      copies?: { count: number; want: number; nodes: string[]; checkedAt: string };
    };
  /** Each node's NodeInventory `checkpoints` summary, by node name. */
  const inventorySummaries = async () =>
    Object.fromEntries(
      (
        JSON.parse(await kubectl(['get', 'nodeinventories', '-o', 'json'])) as {
          items: Array<{ node: string; checkpoints?: Record<string, number> }>;
        }
      ).items.map((i) => [i.node, i.checkpoints]),
    );

  before(async () => {
    nodes = await startThreeNodes('replicas');
    ({ platform, kubectl } = nodes);
    await kubectl(['create', 'namespace', ns]);
  });
  after(() => nodes?.stop());

  it('a snapshot is copied to a second node; with its node and data gone, a Sandbox is created from it elsewhere', async () => {
    const src = await create(sandboxManifest('src'));
    const origin: string = src.status.nodeName;
    const marker = `written-before-${randomBytes(4).toString('hex')}`;
    await sh('src', `mkdir -p /tmp && echo ${marker} > /tmp/marker`);
    const snap = JSON.parse(
      await kubectl(
        ['create', '--raw', `${BASE}/namespaces/${ns}/sandboxes/src/snapshot`, '-f', '-'],
        JSON.stringify({ apiVersion: `${GROUP}/v1beta1`, kind: 'SandboxSnapshotOptions', name: 'kept' }),
      ),
    );
    const id = snap.snapshotID as string;
    assert.match(id, /^ck_/);
    const t0 = Date.now();
    const holders = await eventually(() => snapshotNodes(id), {
      until: (n) => n.length >= 2,
      timeoutMs: REPLICATED_WITHIN_MS,
      intervalMs: 500,
      what: `snapshot ${id} held by two nodes (it is on ${origin})`,
    });
    process.stderr.write(`[replicas] ${id} on ${holders.join(',')} ${Date.now() - t0} ms after the snapshot\n`);
    assert.ok(holders.includes(origin), JSON.stringify(holders));
    assert.equal(holders.length, 2, `two copies, not three: ${JSON.stringify(holders)}`);

    // The origin's own view: where the copies are and how many it wants.
    const node0 = platform.sandboxd.find((n) => n.node === origin)!;
    const token = readFileSync(node0.tokenFile, 'utf8').trim();
    const other = platform.sandboxd.find((n) => n.node !== origin && holders.includes(n.node))!;
    const listed = await eventually(
      async () =>
        (await call(`http://${node0.address}`, 'GET', '/v1/checkpoints', undefined, token)).json.checkpoints as Array<{
          id: string;
          copies?: { nodes: string[]; want: number };
        }>,
      {
        until: (cks) => (cks.find((c) => c.id === id)?.copies?.nodes.length ?? 0) >= 2,
        timeoutMs: 30_000,
        what: 'the origin lists the copies',
      },
    );
    const copies = listed.find((c) => c.id === id)!.copies!;
    assert.deepEqual(copies.nodes, [node0.address, other.address].sort());
    assert.equal(copies.want, 2);

    // The Kubernetes API's view of the same count: by node name, count == want (issue 33 item 1).
    const counted = await eventually(() => snapshotObject(id), {
      until: (o) => o.copies?.count === 2,
      timeoutMs: 30_000,
      what: 'SandboxSnapshot copies counted',
    });
    assert.deepEqual(
      { ...counted.copies, checkedAt: undefined },
      { count: 2, want: 2, nodes: [origin, other.node].sort(), checkedAt: undefined },
    );
    assert.ok(Date.parse(counted.copies!.checkedAt) > t0 - 1000, counted.copies!.checkedAt);
    const table = await kubectl(['get', 'sandboxsnapshots', '-n', ns]);
    assert.match(table.split('\n')[0]!, /\bCOPIES\b/, table);
    assert.match(table, new RegExp(`^${id}\\s.*\\s2/2\\s`, 'm'), table);
    // Each node's NodeInventory sums it up (published every 30 s): the two holders hold one, counted and not short;
    // the third holds none.
    const third = platform.sandboxd.find((n) => !holders.includes(n.node))!.node;
    const summaries = await eventually(inventorySummaries, {
      // A publish made mid-copy says one short; the one after the copy says none.
      until: (s) =>
        [origin, other.node].every((n) => s[n]?.counted === 1 && s[n]?.underReplicated === 0) && s[third]?.held === 0,
      timeoutMs: 90_000,
      intervalMs: 1000,
      what: 'NodeInventory checkpoints summaries',
    });
    for (const n of [origin, other.node])
      assert.deepEqual(summaries[n], { held: 1, replicas: 2, counted: 1, underReplicated: 0 }, n);
    assert.deepEqual(summaries[third], { held: 0, replicas: 2, counted: 0, underReplicated: 0 }, third);

    // The origin dies (SIGKILL) and its disk is lost: its VMs are killed and its data dir removed.
    await nodes.lose(origin);

    const restored = await eventually(
      () =>
        create(sandboxManifest('restored', { annotations: { [SNAPSHOT_ANNOTATION]: id } })).catch((err: unknown) => ({
          err: String(err),
        })),
      {
        until: (r) => !('err' in r),
        timeoutMs: 120_000,
        intervalMs: 2000,
        what: 'a Sandbox from the snapshot once its node is gone',
      },
    );
    assert.notEqual(restored.status.nodeName, origin);
    assert.equal(await sh('restored', 'cat /tmp/marker'), marker);

    // The survivors notice the lost copy and make another: two nodes hold it again, neither of them the origin.
    const again = await eventually(() => snapshotNodes(id), {
      until: (n) => n.length >= 2 && !n.includes(origin),
      timeoutMs: REPLICATED_WITHIN_MS,
      intervalMs: 1000,
      what: `snapshot ${id} re-replicated after ${origin} was lost`,
    });
    assert.equal(again.length, 2, JSON.stringify(again));
    // And the count says so, by name: the two survivors, not the lost node.
    const recounted = await eventually(() => snapshotObject(id), {
      until: (o) => o.copies?.count === 2 && !o.copies.nodes.includes(origin),
      timeoutMs: 60_000,
      intervalMs: 1000,
      what: 'SandboxSnapshot copies recounted without the lost node',
    });
    assert.deepEqual(recounted.copies!.nodes, [...again].sort());
    assert.equal(recounted.copies!.want, 2);
  });
});
