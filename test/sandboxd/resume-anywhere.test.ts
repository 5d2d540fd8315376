/**
 * Resume anywhere (docs/placement.md "Resume anywhere", issue 33 items 2 and 3) on a private aggregated platform of
 * three sandboxd nodes with real microVMs (its own control plane: it kills a node, which no other file may share):
 * a Sandbox with an idle policy is hibernated by it, its hibernation record is copied to a second node, then its
 * node dies (SIGKILL, data dir deleted). The Sandbox's resume verb resumes it on a node holding the copy, with the
 * files written before; a watch sees the object move in one MODIFIED (no DELETED, no ADDED); an Event says where it
 * went and whether the record had to be fetched; and the next exec wakes it from its idle suspend on the new node.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import type { Platform } from '../../src/cli/platform.js';
import { Sandboxes } from '../../src/kube/api-resources.js';
import { KubeClient, type WatchEvent } from '../../src/kube/index.js';
import { sandboxManifest } from '../support/aggregated.js';
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

  before(async () => {
    nodes = await startThreeNodes('anywhere');
    ({ platform, kubectl } = nodes);
    kube = await KubeClient.fromKubeconfig(platform.cluster.kubeconfigPath, { userAgent: 'resume-anywhere-test' });
    await kubectl(['create', 'namespace', ns]);
  });
  after(async () => {
    kube?.close();
    await nodes?.stop();
  });

  it('an idle-suspended Sandbox resumes on another node after its node dies, as one MODIFIED, with its files', async () => {
    const created = await eventually(
      () =>
        kubectl(
          ['create', '-n', ns, '-o', 'json', '-f', '-'],
          JSON.stringify(sandboxManifest('agent', { annotations: { [IDLE_ANNOTATION]: '5' } })),
        ).then(
          (o) => JSON.parse(o) as SandboxObj,
          (err: unknown) => ({ err: String(err) }),
        ),
      { until: (r) => !('err' in r), timeoutMs: 120_000, intervalMs: 500, what: 'the Sandbox created' },
    );
    const origin = (created as SandboxObj).status.nodeName!;
    const marker = `written-before-${randomBytes(4).toString('hex')}`;
    await sh('agent', `echo ${marker} > /root/marker`);

    // Idle for its policy: suspended (hibernated), and its record published and copied to a second node.
    await eventually(() => get('agent'), {
      until: (o) => phaseOf(o) === 'Suspended',
      timeoutMs: 90_000,
      intervalMs: 500,
      what: 'the Sandbox suspended by its idle policy',
    });
    const node0 = platform.sandboxd.find((n) => n.node === origin)!;
    const token = readFileSync(node0.tokenFile, 'utf8').trim();
    const t0 = Date.now();
    const record = await eventually<{ id: string; kind?: string; copies?: { nodes: string[] } } | undefined>(
      async () =>
        (
          (await call(`http://${node0.address}`, 'GET', '/v1/checkpoints?kind=hibernation', undefined, token)).json
            .checkpoints as Array<{ id: string; kind?: string; copies?: { nodes: string[] } }>
        )[0],
      {
        until: (ck) => (ck?.copies?.nodes.length ?? 0) >= 2,
        timeoutMs: 120_000,
        intervalMs: 500,
        what: 'the hibernation record on two nodes',
      },
    );
    assert.ok(record);
    process.stderr.write(`[anywhere] ${record.id} on two nodes ${Date.now() - t0} ms after the suspend was seen\n`);
    assert.equal(record.kind, 'hibernation');
    const snapshots = await call(`http://${node0.address}`, 'GET', '/v1/checkpoints', undefined, token);
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

    const evs = JSON.parse(
      await kubectl([
        'get',
        'events',
        '-n',
        ns,
        '--field-selector',
        'reason=SandboxResumedOnAnotherNode',
        '-o',
        'json',
      ]),
    ) as { items: Array<{ message?: string; note?: string }> };
    assert.equal(evs.items.length, 1, JSON.stringify(evs.items));
    const note = evs.items[0]!.message ?? evs.items[0]!.note ?? '';
    assert.match(note, new RegExp(`on node ${moved.status.nodeName}: node ${origin} is unavailable`));
    assert.match(note, new RegExp(`from hibernation record ${record.id}, (held there|fetched from a peer)`));

    // Its idle policy moved with it: suspended again on the new node, and the next exec wakes it there.
    await eventually(() => get('agent'), {
      until: (o) => phaseOf(o) === 'Suspended',
      timeoutMs: 90_000,
      intervalMs: 500,
      what: 'suspended again on its new node',
    });
    assert.equal(await sh('agent', 'cat /root/marker'), marker, 'an exec wakes it on the new node');
  });

  it('a drained node hibernates its sandboxes, and a resume moves them to another node', async () => {
    const created = await eventually(
      () =>
        kubectl(['create', '-n', ns, '-o', 'json', '-f', '-'], JSON.stringify(sandboxManifest('drained'))).then(
          (o) => JSON.parse(o) as SandboxObj,
          (err: unknown) => ({ err: String(err) }),
        ),
      { until: (r) => !('err' in r), timeoutMs: 120_000, intervalMs: 500, what: 'the Sandbox created' },
    );
    const node = (created as SandboxObj).status.nodeName!;
    const marker = `before-the-drain-${randomBytes(4).toString('hex')}`;
    await sh('drained', `echo ${marker} > /root/marker`);
    const daemon = platform.sandboxd.find((n) => n.node === node)!;
    const token = readFileSync(daemon.tokenFile, 'utf8').trim();
    const api = (method: string, path: string) => call(`http://${daemon.address}`, method, path, undefined, token);
    assert.equal((await api('POST', '/v1/drain')).status, 200);
    // Hibernated by the drain, and its record published and copied (the only other live node holds the copy).
    await eventually(() => get('drained'), {
      until: (o) => phaseOf(o) === 'Hibernated',
      timeoutMs: 90_000,
      intervalMs: 500,
      what: 'the Sandbox hibernated by the drain',
    });
    await eventually(
      async () =>
        (await api('GET', '/v1/checkpoints?kind=hibernation')).json.checkpoints as Array<{
          claim_ref?: string;
          copies?: { nodes: string[] };
        }>,
      {
        // Its own record (the drain hibernates every sandbox of the node, and each gets one).
        until: (cks) => cks.some((c) => c.claim_ref === `${ns}/drained` && (c.copies?.nodes.length ?? 0) >= 2),
        timeoutMs: 120_000,
        intervalMs: 500,
        what: 'its hibernation record on a second node',
      },
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
    const evs = JSON.parse(
      await kubectl([
        'get',
        'events',
        '-n',
        ns,
        '--field-selector',
        'reason=SandboxResumedOnAnotherNode',
        '-o',
        'json',
      ]),
    ) as { items: Array<{ message?: string; involvedObject?: { name?: string } }> };
    const mine = evs.items.filter((i) => i.involvedObject?.name === 'drained');
    assert.equal(mine.length, 1, JSON.stringify(evs.items));
    assert.match(mine[0]!.message ?? '', new RegExp(`node ${node} is draining`));
  });
});
