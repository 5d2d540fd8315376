/**
 * Adoption never overwrites a concurrent owner. The Sandbox controller adopts an unowned Pod, PVC or Service from
 * what it read (the filtered cache); if someone else takes the object between that read and the adoption write,
 * the write must be rejected (409) and the next pass must see the new owner and refuse, as for any foreign child.
 *
 * The race is injected deterministically: the operator runs on its own client, whose adoption writes are held until
 * a second client has made a ConfigMap the object's controller on the real apiserver; then the held write is sent.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { fnv1a32 } from '../../src/api/index.js';
import {
  ConfigMaps,
  KubeClient,
  PersistentVolumeClaims,
  Pods,
  Services,
  isConflict,
  type KubeObject,
  type OwnerReference,
  type ResourceType,
} from '../../src/kube/index.js';
import type { PersistentVolumeClaim, Pod, SandboxObject, Service } from '../../src/operator/sandbox/index.js';
import { createTestNamespace, getTestCluster } from '../support/cluster.js';
import { eventually } from '../support/eventually.js';
import { startTestOperator } from '../support/operator.js';
import {
  condition,
  createSandbox,
  getOrUndefined,
  sandboxManifest,
  testClient,
  waitForSandbox,
} from './sandbox-fixtures.js';

const NAME_HASH = 'agents.x-k8s.io/sandbox-name-hash';

type Outcome = 'written' | 'conflict' | string;

const ownsBySandbox = (body: unknown): boolean =>
  ((body as { metadata?: { ownerReferences?: OwnerReference[] } } | undefined)?.metadata?.ownerReferences ?? []).some(
    (r) => r.kind === 'Sandbox',
  );

/**
 * Hold every adoption write (a Pod/PVC patch or Service update that names a Sandbox owner) of `client` until `rival`
 * has made `owner` the object's controller; record what the apiserver then answered to the held write.
 */
function injectOwnerRace(client: KubeClient, rival: KubeClient, owner: OwnerReference): Map<string, Outcome> {
  const outcomes = new Map<string, Outcome>();
  const race = async <T>(rt: ResourceType, ns: string | undefined, name: string, write: () => Promise<T>) => {
    const key = `${rt.plural}/${name}`;
    if (outcomes.has(key)) return write();
    outcomes.set(key, 'pending');
    await rival.patch(rt, ns, name, { metadata: { ownerReferences: [owner] } }, 'merge');
    try {
      const out = await write();
      outcomes.set(key, 'written');
      return out;
    } catch (err) {
      outcomes.set(key, isConflict(err) ? 'conflict' : `failed: ${(err as Error).message}`);
      throw err;
    }
  };
  const patch = client.patch.bind(client);
  const update = client.update.bind(client);
  client.patch = ((...args: Parameters<KubeClient['patch']>) => {
    const [rt, ns, name, body] = args;
    if ((rt === Pods || rt === PersistentVolumeClaims) && ownsBySandbox(body))
      return race(rt, ns, name, () => patch(...args));
    return patch(...args);
  }) as KubeClient['patch'];
  client.update = ((...args: Parameters<KubeClient['update']>) => {
    const [rt, obj] = args;
    if (rt === Services && ownsBySandbox(obj))
      return race(rt, obj.metadata.namespace, obj.metadata.name ?? '', () => update(...args));
    return update(...args);
  }) as KubeClient['update'];
  return outcomes;
}

describe('Sandbox controller: adoption against a concurrent owner', () => {
  let ns: Awaited<ReturnType<typeof createTestNamespace>>;
  let op: Awaited<ReturnType<typeof startTestOperator>> | undefined;
  before(async () => {
    ns = await createTestNamespace('sb-race');
  });
  after(async () => {
    await op?.stop();
    await ns?.cleanup();
  });

  it('a Pod, PVC or Service taken by another owner after the read is not adopted: 409, then refused', async () => {
    const c = await testClient();
    const cluster = await getTestCluster();
    const cm = await c.create<KubeObject>(ConfigMaps, {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: 'rival', namespace: ns.name },
    });
    const owner: OwnerReference = {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      name: 'rival',
      uid: cm.metadata.uid ?? '',
      controller: true,
      blockOwnerDeletion: false,
    };
    // Unowned children carrying their Sandbox's name hash: in the controller's filtered caches, and adoptable.
    const labels = (sb: string) => ({ [NAME_HASH]: fnv1a32(sb) });
    await c.create<Pod>(Pods, {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'rpod', namespace: ns.name, labels: labels('rpod') },
      spec: { containers: [{ name: 'c', image: 'registry.k8s.io/pause:3.10' }] },
    });
    await c.create<PersistentVolumeClaim>(PersistentVolumeClaims, {
      apiVersion: 'v1',
      kind: 'PersistentVolumeClaim',
      metadata: { name: 'data-rpvc', namespace: ns.name, labels: labels('rpvc') },
      spec: { accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '1Gi' } } },
    });
    await c.create<Service>(Services, {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: 'rsvc', namespace: ns.name, labels: labels('rsvc') },
      spec: { clusterIP: 'None', ports: [{ port: 8888 }], selector: labels('rsvc') },
    });

    const opClient = await KubeClient.fromKubeconfig(cluster.kubeconfigPath, { qps: -1 });
    const outcomes = injectOwnerRace(opClient, c, owner);
    op = await startTestOperator(ns.name, { extensions: false }, opClient);
    await createSandbox(sandboxManifest(ns.name, 'rpod'));
    await createSandbox(
      sandboxManifest(ns.name, 'rpvc', {
        volumeClaimTemplates: [
          {
            metadata: { name: 'data' },
            spec: { accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '1Gi' } } },
          },
        ],
      }),
    );
    await createSandbox(sandboxManifest(ns.name, 'rsvc', { service: true }));

    const keys = ['pods/rpod', 'persistentvolumeclaims/data-rpvc', 'services/rsvc'];
    await eventually(() => keys.map((k) => outcomes.get(k)), {
      until: (v) => v.every((o) => o !== undefined && o !== 'pending'),
      what: 'an adoption write for each child',
    });
    assert.deepEqual(
      Object.fromEntries(keys.map((k) => [k, outcomes.get(k)])),
      Object.fromEntries(keys.map((k) => [k, 'conflict'])),
      'every adoption write sent after the rival took the object is rejected',
    );

    const children: Array<[string, ResourceType, string, string]> = [
      ['rpod', Pods, 'rpod', 'pod'],
      ['rpvc', PersistentVolumeClaims, 'data-rpvc', 'PVC'],
      ['rsvc', Services, 'rsvc', 'service'],
    ];
    for (const [sbName, rt, child, what] of children) {
      const sb = await waitForSandbox(
        ns.name,
        sbName,
        (s: SandboxObject) =>
          (condition(s, 'Ready')?.message ?? '').includes(
            `${what} "${child}" is owned by ConfigMap/rival (UID: ${owner.uid}), not by sandbox "${sbName}"`,
          ),
        `${sbName}: the rival's ${what} refused`,
      );
      assert.equal(condition(sb, 'Ready')?.reason, 'ReconcilerError');
      const now = await getOrUndefined<KubeObject>(rt, ns.name, child);
      assert.deepEqual(now?.metadata.ownerReferences, [owner], `${what} "${child}" keeps the rival as its only owner`);
    }
  });
});
