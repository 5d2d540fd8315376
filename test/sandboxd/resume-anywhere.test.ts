/**
 * Resume anywhere (docs/placement.md "Resume anywhere", issue 33 items 2 and 3) on a private aggregated platform of
 * three sandboxd nodes with real microVMs (its own control plane: it kills a node, which no other file may share):
 * a Sandbox with an idle policy is hibernated by it, its hibernation record is copied to a second node, then its
 * node dies (SIGKILL, data dir deleted). The Sandbox's resume verb resumes it on a node holding the copy, with the
 * files written before; a watch sees the object move in one MODIFIED (no DELETED, no ADDED); an Event says where it
 * went and whether the record had to be fetched; and the next exec wakes it from its idle suspend on the new node.
 * A drained node's Sandbox, and one suspended on a node that has since filled up (every node runs --max-claims 2),
 * move the same way.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import type { Platform } from '../../src/cli/platform.js';
import { Sandboxes } from '../../src/kube/api-resources.js';
import { KubeClient, type WatchEvent } from '../../src/kube/index.js';
import { sandboxManifest, TEST_TEMPLATE } from '../support/aggregated.js';
import { eventually } from '../support/eventually.js';
import { call } from '../support/sandboxd-daemon.js';
import { BASE, GROUP, startThreeNodes, type ThreeNodes } from '../support/three-nodes.js';

const IDLE_ANNOTATION = 'sandbox.cocoonstack.io/idle-hibernate-seconds';

interface SandboxObj {
  metadata: { name: string; resourceVersion: string; labels?: Record<string, string> };
  status: { nodeName?: string };
}
/** The node's phase, as the server labels it (Running, Suspended, Hibernated, …). */
const phaseOf = (o: SandboxObj) => o.metadata.labels?.['sandbox.cocoonstack.io/phase'];

describe('resume anywhere: a hibernated Sandbox outlives its node (real microVMs, aggregated layout)', () => {
  let nodes: ThreeNodes;
  let platform: Platform;
  let kube: KubeClient;
  let kubectl: ThreeNodes['kubectl'];
  const ns = `anywhere-${randomBytes(3).toString('hex')}`;

  const sh = (name: string, script: string) => nodes.sh(ns, name, script);
  const get = async (name: string) =>
    JSON.parse(await kubectl(['get', 'sandbox', name, '-n', ns, '-o', 'json'])) as SandboxObj;

  /**
   * The message of the one SandboxResumedOnAnotherNode Event of Sandbox `name` (recorded off the request's path,
   * so waited for; a second one would be a second move).
   */
  const movedNote = async (name: string): Promise<string> => {
    const items = await eventually(
      async () =>
        (
          JSON.parse(
            await kubectl([
              'get',
              'events',
              '-n',
              ns,
              '--field-selector',
              `reason=SandboxResumedOnAnotherNode,involvedObject.name=${name}`,
              '-o',
              'json',
            ]),
          ) as { items: Array<{ message?: string; note?: string }> }
        ).items,
      { until: (i) => i.length > 0, timeoutMs: 10_000, what: `the Event of ${name}'s move` },
    );
    assert.equal(items.length, 1, JSON.stringify(items));
    return items[0]!.message ?? items[0]!.note ?? '';
  };

  /** Create Sandbox `name` (retried until a node has a warm VM for it); the node it landed on. */
  const create = async (name: string, annotations?: Record<string, string>): Promise<string> => {
    const created = await eventually(
      () =>
        kubectl(
          ['create', '-n', ns, '-o', 'json', '-f', '-'],
          JSON.stringify(sandboxManifest(name, annotations ? { annotations } : {})),
        ).then(
          (o) => JSON.parse(o) as SandboxObj,
          (err: unknown) => ({ err: String(err) }),
        ),
      { until: (r) => !('err' in r), timeoutMs: 120_000, intervalMs: 500, what: `Sandbox ${name} created` },
    );
    return (created as SandboxObj).status.nodeName!;
  };
  /** Wait for Sandbox `name` to reach `phase`. */
  const phase = (name: string, want: string, what: string) =>
    eventually(() => get(name), { until: (o) => phaseOf(o) === want, timeoutMs: 90_000, intervalMs: 500, what });
  /** sandboxd's own API on `node`, as root. */
  const nodeApi = (node: string) => {
    const d = platform.sandboxd.find((n) => n.node === node)!;
    return (method: string, path: string, body?: unknown) =>
      call(`http://${d.address}`, method, path, body, readFileSync(d.tokenFile, 'utf8').trim());
  };
  /** Sandbox `name`'s hibernation record, as `node` lists it, once it is on two nodes. */
  const recordOnTwoNodes = (node: string, name: string) =>
    eventually(
      async () =>
        (
          (await nodeApi(node)('GET', '/v1/checkpoints?kind=hibernation')).json.checkpoints as Array<{
            id: string;
            kind?: string;
            claim_ref?: string;
            copies?: { nodes: string[] };
          }>
        ).find((c) => c.claim_ref === `${ns}/${name}`),
      {
        until: (ck) => (ck?.copies?.nodes.length ?? 0) >= 2,
        timeoutMs: 120_000,
        intervalMs: 500,
        what: `${name}'s hibernation record on a second node`,
      },
    );

  before(async () => {
    // Two running sandboxes fill a node: the last case fills one with two claims of its own.
    nodes = await startThreeNodes('anywhere', ['--max-claims', '2']);
    ({ platform, kubectl } = nodes);
    kube = await KubeClient.fromKubeconfig(platform.cluster.kubeconfigPath, { userAgent: 'resume-anywhere-test' });
    await kubectl(['create', 'namespace', ns]);
  });
  after(async () => {
    kube?.close();
    await nodes?.stop();
  });

  it('an idle-suspended Sandbox resumes on another node after its node dies, as one MODIFIED, with its files', async () => {
    const origin = await create('agent', { [IDLE_ANNOTATION]: '5' });
    const marker = `written-before-${randomBytes(4).toString('hex')}`;
    await sh('agent', `echo ${marker} > /root/marker`);

    // Idle for its policy: suspended (hibernated), and its record published and copied to a second node.
    await phase('agent', 'Suspended', 'the Sandbox suspended by its idle policy');
    const t0 = Date.now();
    const record = await recordOnTwoNodes(origin, 'agent');
    assert.ok(record);
    process.stderr.write(`[anywhere] ${record.id} on two nodes ${Date.now() - t0} ms after the suspend was seen\n`);
    assert.equal(record.kind, 'hibernation');
    const snapshots = await nodeApi(origin)('GET', '/v1/checkpoints');
    assert.deepEqual(snapshots.json.checkpoints, [], 'a hibernation record is not listed as a snapshot');

    // Watch the Sandbox from here on.
    const events: Array<WatchEvent<SandboxObj>> = [];
    const stop = new AbortController();
    const rv = (await get('agent')).metadata.resourceVersion;
    const watching = kube
      .watch<SandboxObj>(
        Sandboxes,
        ns,
        { fieldSelector: 'metadata.name=agent', resourceVersion: rv },
        (ev) => events.push(ev),
        stop.signal,
      )
      .catch(() => undefined);

    // The node dies and its disk is lost.
    await nodes.lose(origin);

    const resume = () =>
      kubectl(
        ['create', '--raw', `${BASE}/namespaces/${ns}/sandboxes/agent/resume`, '-f', '-'],
        JSON.stringify({ apiVersion: `${GROUP}/v1beta1`, kind: 'SandboxResumeOptions' }),
      ).catch((err: unknown) => ({ err: String(err) }));
    const r0 = Date.now();
    await eventually(resume, {
      until: (r) => typeof r === 'string',
      timeoutMs: 120_000,
      intervalMs: 2000,
      what: 'the resume of the Sandbox whose node is gone',
    });
    process.stderr.write(`[anywhere] resumed elsewhere ${Date.now() - r0} ms after the first try\n`);
    const moved = await get('agent');
    assert.notEqual(moved.status.nodeName, origin, 'it runs on another node');
    assert.equal(await sh('agent', 'cat /root/marker'), marker, 'with the files written before');

    // One MODIFIED moved it: no DELETED, no ADDED, and the first event naming another node is that MODIFIED.
    await eventually(() => events.find((e) => e.object.status?.nodeName === moved.status.nodeName), {
      until: (e) => e !== undefined,
      timeoutMs: 10_000,
      what: 'the watch event of the move',
    });
    stop.abort();
    await watching;
    const types = events.map((e) => `${e.type}:${e.object.status?.nodeName ?? ''}`);
    assert.ok(!events.some((e) => e.type === 'DELETED' || e.type === 'ADDED'), types.join(' '));
    assert.equal(events.find((e) => e.object.status?.nodeName !== origin)?.type, 'MODIFIED', types.join(' '));

    const note = await movedNote('agent');
    assert.match(note, new RegExp(`on node ${moved.status.nodeName}: node ${origin} is unavailable`));
    assert.match(note, new RegExp(`from hibernation record ${record.id}, (held there|fetched from a peer)`));

    // Its idle policy moved with it: suspended again on the new node, and the next exec wakes it there.
    await phase('agent', 'Suspended', 'suspended again on its new node');
    assert.equal(await sh('agent', 'cat /root/marker'), marker, 'an exec wakes it on the new node');
  });

  it('a drained node hibernates its sandboxes, and a resume moves them to another node', async () => {
    const node = await create('drained');
    const marker = `before-the-drain-${randomBytes(4).toString('hex')}`;
    await sh('drained', `echo ${marker} > /root/marker`);
    const api = nodeApi(node);
    assert.equal((await api('POST', '/v1/drain')).status, 200);
    // Hibernated by the drain, and its record published and copied (the only other live node holds the copy).
    await phase('drained', 'Hibernated', 'the Sandbox hibernated by the drain');
    await recordOnTwoNodes(node, 'drained');
    // The drain's progress says so: its record survives this node's disk.
    const progress = await eventually(
      async () => (await api('GET', '/v1/info')).json.drain as { hibernated: number; portable: number; copied: number },
      { until: (d) => d.copied >= 1, timeoutMs: 30_000, what: 'drain.copied counting the record' },
    );
    assert.ok(
      progress.copied <= progress.portable && progress.portable <= progress.hibernated,
      JSON.stringify(progress),
    );
    await kubectl(
      ['create', '--raw', `${BASE}/namespaces/${ns}/sandboxes/drained/resume`, '-f', '-'],
      JSON.stringify({ apiVersion: `${GROUP}/v1beta1`, kind: 'SandboxResumeOptions' }),
    );
    const moved = await get('drained');
    assert.notEqual(moved.status.nodeName, node, 'resumed on another node, not the draining one');
    assert.equal(await sh('drained', 'cat /root/marker'), marker);
    // The draining node lets its old claim go: nothing of the sandbox is left there.
    await eventually(
      async () =>
        ((await api('GET', '/v1/sandboxes')).json.sandboxes as Array<{ claim_ref?: string }>).filter(
          (r) => r.claim_ref === `${ns}/drained`,
        ).length,
      { until: (n) => n === 0, timeoutMs: 30_000, what: 'the old claim released on the drained node' },
    );
    assert.match(await movedNote('drained'), new RegExp(`node ${node} is draining`));
  });

  it('a Sandbox suspended on a node that has since filled up wakes on another node at its next exec', async () => {
    // What the earlier cases left: their Sandboxes go, and the drained node takes sandboxes again.
    await kubectl(['delete', 'sandboxes', '--all', '-n', ns, '--wait=true', '--timeout=60s']);
    // The node lost in the first case answers nothing (its token file may be gone with its data dir).
    for (const d of platform.sandboxd)
      await Promise.resolve()
        .then(() => nodeApi(d.node)('DELETE', '/v1/drain'))
        .catch(() => undefined);
    const node = await create('crowded', { [IDLE_ANNOTATION]: '5' });
    const api = nodeApi(node);
    const marker = `before-the-crowd-${randomBytes(4).toString('hex')}`;
    await sh('crowded', `echo ${marker} > /root/marker`);
    await phase('crowded', 'Suspended', 'the Sandbox suspended by its idle policy');
    await recordOnTwoNodes(node, 'crowded');
    // Its node fills up: two claims of the node's own (--max-claims 2), so it has no slot to wake it in.
    const fillers: string[] = [];
    for (let i = 0; i < 2; i++) {
      // no_redirect: on this node (one without a warm VM would send the claim to a peer that has one).
      const r = await api('POST', '/v1/claim', { template: TEST_TEMPLATE, ttl_seconds: 300, no_redirect: true });
      assert.equal(r.status, 200, JSON.stringify(r.json));
      fillers.push(String(r.json.id));
    }
    try {
      const full = await api('POST', '/v1/claim', { template: TEST_TEMPLATE, ttl_seconds: 300, no_redirect: true });
      if (full.status === 200) fillers.push(String(full.json.id));
      assert.equal(full.status, 429, 'the node is full');
      assert.equal(full.json.code, 'sandboxd.at-capacity', JSON.stringify(full.json));

      // The next exec finds it suspended on a full node: it wakes on the node holding the copy and runs there.
      assert.equal(await sh('crowded', 'cat /root/marker'), marker, 'with the files written before');
      const moved = await get('crowded');
      assert.notEqual(moved.status.nodeName, node, 'it runs on another node');
      assert.match(await movedNote('crowded'), new RegExp(`node ${node} is full`));
      // Its old claim on the full node is let go.
      await eventually(
        async () =>
          ((await api('GET', '/v1/sandboxes')).json.sandboxes as Array<{ claim_ref?: string }>).filter(
            (r) => r.claim_ref === `${ns}/crowded`,
          ).length,
        { until: (n) => n === 0, timeoutMs: 30_000, what: 'the old claim released on the full node' },
      );
    } finally {
      for (const id of fillers) await api('POST', `/v1/sandboxes/${id}/release`);
    }
  });
});
