/**
 * Suspend/resume and volumes on a real control plane: TestSandboxSuspendResumeCycleWithOperatingMode,
 * TestSandboxSuspensionWithTerminatingPod, TestSandboxSuspensionBlockedByUnownedPodConflict,
 * TestSandboxVolumeClaimTemplates (a static PV stands in for a provisioner), TestSandboxVolumeClaimTemplatesImmutable;
 * spec §16 items 7 and 9.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { convertObject, fnv1a32 } from '../../src/api/index.js';
import { KubeClient, PersistentVolumeClaims, Pods, type ResourceType } from '../../src/kube/index.js';
import type { PersistentVolumeClaim, Pod } from '../../src/operator/sandbox/index.js';
import { getTestCluster } from '../support/cluster.js';
import {
  condition,
  conditionTable,
  createSandbox,
  getOrUndefined,
  getPod,
  getService,
  isReady,
  patchSandbox,
  sandboxManifest,
  testClient,
  waitForSandbox,
  withOperator,
} from './sandbox-fixtures.js';

const PersistentVolumes: ResourceType = {
  group: '',
  version: 'v1',
  kind: 'PersistentVolume',
  plural: 'persistentvolumes',
  namespaced: false,
};

const SUSPENDED = {
  Suspended: { status: 'True', reason: 'PodTerminated', message: 'Pod has been terminated. Sandbox is suspended' },
  Ready: { status: 'False', reason: 'SandboxSuspended', message: 'Sandbox is suspended' },
} as const;
const RUNNING = {
  Suspended: { status: 'False', reason: 'NotSuspended', message: 'Sandbox is not suspended' },
  PodScheduled: { status: 'True', reason: 'PodScheduled', message: '' },
  Ready: { status: 'True', reason: 'DependenciesReady', message: 'Pod is Ready; Service Exists' },
} as const;
const withGen = (table: Record<string, object>, gen: number) =>
  Object.fromEntries(Object.entries(table).map(([k, v]) => [k, { ...v, observedGeneration: gen }]));

/** A static PV (class `manual-<ns>`) the PVC `data-<sb>` binds to, so the pod schedules without a provisioner. */
async function staticPv(client: KubeClient, ns: string): Promise<string> {
  const name = `pv-${ns}`;
  await client.create(PersistentVolumes, {
    apiVersion: 'v1',
    kind: 'PersistentVolume',
    metadata: { name },
    spec: {
      capacity: { storage: '1Gi' },
      accessModes: ['ReadWriteOnce'],
      storageClassName: `manual-${ns}`,
      persistentVolumeReclaimPolicy: 'Retain',
      hostPath: { path: `/tmp/${name}` },
    },
  } as never);
  return name;
}

describe('Sandbox controller: suspend, resume, volumes', { concurrency: 4 }, () => {
  it('TestSandboxSuspendResumeCycleWithOperatingMode + TestSandboxVolumeClaimTemplates (§16 7)', () =>
    withOperator('sb-cycle', async ({ ns }) => {
      const client = await testClient();
      const pv = await staticPv(client, ns);
      try {
        const vct = [
          {
            metadata: { name: 'data', labels: { tier: 'disk' } },
            spec: {
              accessModes: ['ReadWriteOnce'],
              storageClassName: `manual-${ns}`,
              resources: { requests: { storage: '1Gi' } },
            },
          },
        ];
        const created = await createSandbox(sandboxManifest(ns, 'cyc', { service: true, volumeClaimTemplates: vct }));
        let sb = await waitForSandbox(ns, 'cyc', isReady, 'Ready with a bound PVC', 45_000);
        assert.deepEqual(conditionTable(sb), withGen(RUNNING, 1));
        const pvc = await getOrUndefined<PersistentVolumeClaim>(PersistentVolumeClaims, ns, 'data-cyc');
        assert.equal(pvc?.metadata.labels?.['agents.x-k8s.io/sandbox-name-hash'], fnv1a32('cyc'));
        assert.equal(pvc?.metadata.labels?.tier, 'disk');
        assert.equal(pvc?.metadata.ownerReferences?.[0]?.uid, created.metadata.uid);
        let pod = await getPod(ns, 'cyc');
        assert.deepEqual(pod?.spec.volumes?.find((v) => v.name === 'data')?.persistentVolumeClaim, {
          claimName: 'data-cyc',
        });
        let lastReadyLtt = condition(sb, 'Ready')!.lastTransitionTime;
        const selector = sb.status?.selector;

        for (const cycle of [1, 2]) {
          const oldUid = pod?.metadata.uid;
          const suspendGen = 2 * cycle;
          await patchSandbox(ns, 'cyc', { spec: { operatingMode: 'Suspended' } });
          sb = await waitForSandbox(
            ns,
            'cyc',
            (s) => condition(s, 'Suspended')?.status === 'True',
            `suspended (cycle ${cycle})`,
          );
          assert.deepEqual(conditionTable(sb), withGen(SUSPENDED, suspendGen));
          assert.equal(sb.status?.podIPs, undefined);
          assert.equal(sb.status?.nodeName, undefined);
          assert.equal(sb.status?.selector, selector, 'selector kept');
          assert.equal(sb.metadata.annotations?.['agents.x-k8s.io/pod-name'], undefined);
          assert.equal(await getPod(ns, 'cyc'), undefined, 'pod deleted');
          assert.ok(await getService(ns, 'cyc'), 'service persists');
          assert.ok(await getOrUndefined(PersistentVolumeClaims, ns, 'data-cyc'), 'PVC persists');
          assert.ok(condition(sb, 'Ready')!.lastTransitionTime > lastReadyLtt, 'Ready LTT advances');

          await patchSandbox(ns, 'cyc', { spec: { operatingMode: 'Running' } });
          sb = await waitForSandbox(ns, 'cyc', isReady, `resumed (cycle ${cycle})`);
          assert.deepEqual(conditionTable(sb), withGen(RUNNING, suspendGen + 1));
          pod = await getPod(ns, 'cyc');
          assert.notEqual(pod?.metadata.uid, oldUid, 'a new pod');
          assert.deepEqual(
            pod?.spec.volumes?.find((v) => v.name === 'data')?.persistentVolumeClaim,
            { claimName: 'data-cyc' },
            'same PVC reattached',
          );
          assert.ok(condition(sb, 'Ready')!.lastTransitionTime > lastReadyLtt);
          lastReadyLtt = condition(sb, 'Ready')!.lastTransitionTime;
        }
      } finally {
        await client.delete(PersistentVolumes, undefined, pv).catch(() => {});
      }
    }));

  it('TestSandboxSuspensionWithTerminatingPod: PodTerminating while a finalizer holds the pod, then PodTerminated', () =>
    withOperator('sb-term', async ({ ns }) => {
      const client = await testClient();
      await createSandbox(sandboxManifest(ns, 'term'));
      await waitForSandbox(ns, 'term', isReady, 'Ready');
      await client.patch(Pods, ns, 'term', { metadata: { finalizers: ['example.com/hold'] } }, 'merge');
      await patchSandbox(ns, 'term', { spec: { operatingMode: 'Suspended' } });
      const sb = await waitForSandbox(
        ns,
        'term',
        (s) => condition(s, 'Suspended')?.reason === 'PodTerminating',
        'PodTerminating',
      );
      assert.deepEqual(conditionTable(sb).Suspended, {
        status: 'False',
        reason: 'PodTerminating',
        message: 'Pod is terminating. Sandbox is suspending',
        observedGeneration: 2,
      });
      assert.deepEqual(conditionTable(sb).Ready, {
        status: 'False',
        reason: 'SandboxSuspended',
        message: 'Sandbox is suspending',
        observedGeneration: 2,
      });
      assert.ok((await getPod(ns, 'term'))?.metadata.deletionTimestamp);
      await client.patch(Pods, ns, 'term', { metadata: { finalizers: null } }, 'merge');
      const done = await waitForSandbox(
        ns,
        'term',
        (s) => condition(s, 'Suspended')?.reason === 'PodTerminated',
        'PodTerminated',
      );
      assert.deepEqual(conditionTable(done), withGen(SUSPENDED, 2));
    }));

  it('TestSandboxSuspensionBlockedByUnownedPodConflict: an unowned pod is never deleted (PodNotOwned)', () =>
    withOperator('sb-block', async ({ ns }) => {
      const client = await testClient();
      const foreign: Pod = {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name: 'blocked', namespace: ns },
        spec: { containers: [{ name: 'c', image: 'registry.k8s.io/pause:3.10' }] },
      };
      const before = await client.create(Pods, foreign);
      await createSandbox(sandboxManifest(ns, 'blocked', { operatingMode: 'Suspended' }));
      const sb = await waitForSandbox(
        ns,
        'blocked',
        (s) => condition(s, 'Suspended')?.reason === 'PodNotOwned',
        'PodNotOwned',
      );
      assert.deepEqual(conditionTable(sb), {
        Suspended: {
          status: 'False',
          reason: 'PodNotOwned',
          message: 'Refused to delete pod because it is not owned by this sandbox',
          observedGeneration: 1,
        },
        Ready: { status: 'False', reason: 'SandboxSuspended', message: 'Sandbox is suspending', observedGeneration: 1 },
      });
      assert.equal(sb.status?.selector, `agents.x-k8s.io/sandbox-name-hash=${fnv1a32('blocked')}`);
      const after = await getPod(ns, 'blocked');
      assert.equal(after?.metadata.uid, before.metadata.uid);
      assert.equal(after?.metadata.deletionTimestamp, undefined);
      assert.equal(after?.metadata.ownerReferences, undefined, 'not adopted');
      assert.equal(after?.metadata.labels, undefined, 'not touched');
    }));

  it('TestSandboxVolumeClaimTemplatesImmutable: set→modified, unset→set, set→unset are rejected', async () => {
    const cluster = await getTestCluster();
    const client = await KubeClient.fromKubeconfig(cluster.kubeconfigPath);
    const { createTestNamespace } = await import('../support/cluster.js');
    const ns = await createTestNamespace('sb-immut');
    try {
      const vct = [
        {
          metadata: { name: 'data' },
          spec: { accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '1Gi' } } },
        },
      ];
      await createSandbox(sandboxManifest(ns.name, 'with', { volumeClaimTemplates: vct }));
      await createSandbox(sandboxManifest(ns.name, 'without'));
      const attempts: Array<[string, string, unknown]> = [
        ['set→modified', 'with', { spec: { volumeClaimTemplates: [{ ...vct[0], metadata: { name: 'other' } }] } }],
        ['set→unset', 'with', { spec: { volumeClaimTemplates: null } }],
        ['unset→set', 'without', { spec: { volumeClaimTemplates: vct } }],
      ];
      for (const [what, name, patch] of attempts) {
        await assert.rejects(patchSandbox(ns.name, name, patch), /volumeClaimTemplates is immutable/, what);
      }
    } finally {
      client.close();
      await ns.cleanup();
    }
  });

  it('§16 9: v1alpha1 replicas 0/1 and v1beta1 operatingMode Suspended/Running are one state', () => {
    for (const [replicas, mode] of [
      [0, 'Suspended'],
      [1, 'Running'],
    ] as const) {
      const alpha = {
        apiVersion: 'agents.x-k8s.io/v1alpha1',
        kind: 'Sandbox',
        metadata: { name: 's' },
        spec: { podTemplate: { spec: { containers: [] } }, replicas },
      };
      const hub = convertObject(alpha, 'agents.x-k8s.io/v1beta1') as { spec: { operatingMode?: string } };
      assert.equal(hub.spec.operatingMode ?? 'Running', mode);
      const back = convertObject(hub, 'agents.x-k8s.io/v1alpha1') as {
        spec: { replicas?: number };
        metadata: { annotations?: Record<string, string> };
      };
      assert.equal(back.spec.replicas, replicas);
      const again = convertObject(convertObject(back, 'agents.x-k8s.io/v1beta1'), 'agents.x-k8s.io/v1alpha1');
      assert.deepEqual(again, back, 'round trips are stable (state annotations never nest)');
    }
  });
});
