/**
 * Read-your-writes and push watches on the aggregated API (@kubernetes/client-node as the client, through
 * kube-apiserver): a Get, List and Delete right after each Create see it, a Get right after the Delete says
 * NotFound — with NodeInventory publishing at its default 30 s, so nothing here can come from the inventory — and a
 * watcher started first sees every create and delete, in order, including sandboxes that lived for milliseconds.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { CustomObjectsApi, KubeConfig, Watch } from '@kubernetes/client-node';
import { aggregatedNamespace, getAggregated, sandboxManifest, type AggregatedEnv } from '../support/aggregated.js';
import { eventually } from '../support/eventually.js';

const GROUP = 'agents.x-k8s.io';
const VERSION = 'v1beta1';
const PLURAL = 'sandboxes';

interface Obj {
  metadata: { name: string; uid: string; resourceVersion: string; annotations?: Record<string, string> };
}

/** Retries a create while no warm VM is left (503 + Retry-After): capacity is not what this test measures. */
async function createWithCapacity(api: CustomObjectsApi, namespace: string, body: object): Promise<Obj> {
  for (let i = 0; ; i++) {
    try {
      return (await api.createNamespacedCustomObject({
        group: GROUP,
        version: VERSION,
        namespace,
        plural: PLURAL,
        body,
      })) as Obj;
    } catch (err) {
      const code = (err as { code?: number }).code;
      if (code !== 503 || i > 300) throw err;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

describe('aggregated sandboxes: read-your-writes and watch', () => {
  let env: AggregatedEnv;
  let api: CustomObjectsApi;
  let kc: KubeConfig;
  let ns: { name: string; cleanup(): Promise<void> };
  before(async () => {
    env = await getAggregated();
    kc = new KubeConfig();
    kc.loadFromFile(env.cluster.kubeconfigPath);
    api = kc.makeApiClient(CustomObjectsApi);
    ns = await aggregatedNamespace('ryw');
  });
  after(async () => ns?.cleanup());

  it('100 creates, each followed at once by a Get, a List and a Delete, then a Get that is NotFound', async () => {
    let ok = 0;
    for (let i = 0; i < 100; i++) {
      const name = `ryw-${i}`;
      const created = await createWithCapacity(api, ns.name, sandboxManifest(name));
      const got = (await api.getNamespacedCustomObject({
        group: GROUP,
        version: VERSION,
        namespace: ns.name,
        plural: PLURAL,
        name,
      })) as Obj;
      assert.equal(got.metadata.uid, created.metadata.uid);
      const listed = (await api.listNamespacedCustomObject({
        group: GROUP,
        version: VERSION,
        namespace: ns.name,
        plural: PLURAL,
      })) as { items: Obj[] };
      assert.ok(
        listed.items.some((o) => o.metadata.name === name),
        `list right after create shows ${name}`,
      );
      await api.deleteNamespacedCustomObject({
        group: GROUP,
        version: VERSION,
        namespace: ns.name,
        plural: PLURAL,
        name,
      });
      await assert.rejects(
        api.getNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: ns.name, plural: PLURAL, name }),
        (err: { code?: number }) => err.code === 404,
      );
      ok++;
    }
    assert.equal(ok, 100);
  });

  it('a second create of a live name is 409 AlreadyExists and claims no VM', async () => {
    await createWithCapacity(api, ns.name, sandboxManifest('twice'));
    const before = (await api.listClusterCustomObject({ group: GROUP, version: VERSION, plural: PLURAL })) as {
      items: Obj[];
    };
    await assert.rejects(
      api.createNamespacedCustomObject({
        group: GROUP,
        version: VERSION,
        namespace: ns.name,
        plural: PLURAL,
        body: sandboxManifest('twice'),
      }),
      (err: { code?: number; body?: string }) => err.code === 409 && /AlreadyExists/.test(String(err.body)),
    );
    const afterList = (await api.listClusterCustomObject({ group: GROUP, version: VERSION, plural: PLURAL })) as {
      items: Obj[];
    };
    assert.equal(afterList.items.length, before.items.length, 'no sandbox was added by the refused create');
  });

  it('a watcher started before 20 creates and deletes sees every one, in order', async () => {
    const wns = await aggregatedNamespace('watch');
    const events: Array<[string, string]> = [];
    const watch = new Watch(kc);
    const req = await watch.watch(
      `/apis/${GROUP}/${VERSION}/namespaces/${wns.name}/${PLURAL}`,
      { allowWatchBookmarks: true },
      (type: string, obj: Obj) => {
        if (type !== 'BOOKMARK') events.push([type, obj.metadata.name]);
      },
      () => undefined,
    );
    try {
      const expected: Array<[string, string]> = [];
      for (let i = 0; i < 20; i++) {
        const name = `w-${i}`;
        await createWithCapacity(api, wns.name, sandboxManifest(name));
        await api.deleteNamespacedCustomObject({
          group: GROUP,
          version: VERSION,
          namespace: wns.name,
          plural: PLURAL,
          name,
        });
        expected.push(['ADDED', name], ['DELETED', name]);
      }
      await eventually(() => events.length, { until: (n) => n >= 40, timeoutMs: 10_000, what: '40 watch events' });
      assert.deepEqual(events, expected);
    } finally {
      req.abort();
      await wns.cleanup();
    }
  });

  it('resumes a watch from a resourceVersion, and answers 410 for one it no longer holds', async () => {
    const a = await createWithCapacity(api, ns.name, sandboxManifest('resume-a'));
    const b = await createWithCapacity(api, ns.name, sandboxManifest('resume-b'));
    const events: string[] = [];
    const watch = new Watch(kc);
    const req = await watch.watch(
      `/apis/${GROUP}/${VERSION}/namespaces/${ns.name}/${PLURAL}`,
      { resourceVersion: a.metadata.resourceVersion },
      (type: string, obj: Obj) => events.push(`${type} ${obj.metadata.name}`),
      () => undefined,
    );
    try {
      await eventually(() => events, {
        until: (e) => e.includes('ADDED resume-b'),
        timeoutMs: 5000,
        what: 'the replayed create',
      });
      assert.ok(!events.includes('ADDED resume-a'), 'events at or before the resourceVersion are not replayed');
      assert.ok(b.metadata.resourceVersion > a.metadata.resourceVersion);
    } finally {
      req.abort();
    }
    const raw = await env
      .kubectl([
        'get',
        '--raw',
        `/apis/${GROUP}/${VERSION}/namespaces/${ns.name}/${PLURAL}?watch=1&resourceVersion=12345`,
      ])
      .catch((e: Error) => e.message);
    assert.match(raw, /Expired|too old|410/i);
  });

  it('serves WatchList: initial ADDED events, then the initial-events-end bookmark', async () => {
    await createWithCapacity(api, ns.name, sandboxManifest('wl'));
    const lines: Array<{
      type: string;
      object: { metadata: { name?: string; annotations?: Record<string, string> } };
    }> = [];
    const watch = new Watch(kc);
    const req = await watch.watch(
      `/apis/${GROUP}/${VERSION}/namespaces/${ns.name}/${PLURAL}`,
      { sendInitialEvents: true, resourceVersionMatch: 'NotOlderThan', allowWatchBookmarks: true, resourceVersion: '' },
      (type: string, object: (typeof lines)[number]['object']) => lines.push({ type, object }),
      () => undefined,
    );
    try {
      await eventually(() => lines, {
        until: (l) => l.some((e) => e.type === 'BOOKMARK'),
        timeoutMs: 5000,
        what: 'the bookmark',
      });
      const end = lines.findIndex((e) => e.type === 'BOOKMARK');
      assert.equal(lines[end]!.object.metadata.annotations?.['k8s.io/initial-events-end'], 'true');
      assert.ok(lines.slice(0, end).some((e) => e.type === 'ADDED' && e.object.metadata.name === 'wl'));
      assert.ok(lines.slice(0, end).every((e) => e.type === 'ADDED'));
    } finally {
      req.abort();
    }
  });
});
