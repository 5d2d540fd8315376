/**
 * Ownership and bad input on a real control plane (spec §16 item 5; issue acceptance "Bad input"): the
 * controller never deletes, mutates or adopts a child controlled by someone else, adopts unowned ones only with
 * `adoptable=true` or a matching name-hash label, reports every refusal as Ready=False ReconcilerError with the
 * documented message, and keeps reconciling the other Sandboxes meanwhile.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { fnv1a32 } from '../../src/api/index.js';
import {
  ConfigMaps,
  PersistentVolumeClaims,
  Pods,
  Services,
  type KubeObject,
  type OwnerReference,
} from '../../src/kube/index.js';
import type { PersistentVolumeClaim, Pod, SandboxObject, Service } from '../../src/operator/sandbox/index.js';
import { eventually } from '../support/eventually.js';
import {
  condition,
  conditionTable,
  createSandbox,
  getOrUndefined,
  getPod,
  getService,
  isReady,
  readyReason,
  sandboxManifest,
  testClient,
  waitForSandbox,
  withOperator,
} from './sandbox-fixtures.js';

const ADOPT_HINT =
  'missing required pool authorization label ("agents.x-k8s.io/adoptable") or sandbox tracking label ("agents.x-k8s.io/sandbox-name-hash")';

async function configMapOwner(ns: string, name: string): Promise<OwnerReference> {
  const cm = await (
    await testClient()
  ).create<KubeObject>(ConfigMaps, { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name, namespace: ns } });
  return {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    name,
    uid: cm.metadata.uid ?? '',
    controller: true,
    blockOwnerDeletion: false,
  };
}

function barePod(ns: string, name: string, meta: Partial<Pod['metadata']> = {}): Pod {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: ns, ...meta },
    spec: { containers: [{ name: 'c', image: 'registry.k8s.io/pause:3.10' }] },
  };
}

const readyMessage = (sb: SandboxObject) => condition(sb, 'Ready')?.message ?? '';

describe('Sandbox controller: ownership and bad input', { concurrency: 3 }, () => {
  it('bad input: adapter conflict, missing storage class, unowned same-name pod, foreign pod — each reported, the rest still reconciled', () =>
    withOperator('sb-bad', async ({ ns }) => {
      const client = await testClient();
      const owner = await configMapOwner(ns, 'owner');
      const foreign = await client.create(Pods, barePod(ns, 'foreign', { ownerReferences: [owner] }));
      const squatter = await client.create(Pods, barePod(ns, 'squatter'));

      const conflict = sandboxManifest(ns, 'conflict');
      conflict.spec.podTemplate.metadata = { annotations: { 'sandbox.cocoonstack.io/runtime': 'vk-cocoon' } };
      conflict.spec.podTemplate.spec.runtimeClassName = 'kata';
      await createSandbox(conflict);
      await createSandbox(
        sandboxManifest(ns, 'nostorage', {
          volumeClaimTemplates: [
            {
              metadata: { name: 'data' },
              spec: {
                accessModes: ['ReadWriteOnce'],
                storageClassName: 'no-such-class',
                resources: { requests: { storage: '1Gi' } },
              },
            },
          ],
        }),
      );
      await createSandbox(sandboxManifest(ns, 'squatter'));
      await createSandbox(sandboxManifest(ns, 'foreign'));
      await createSandbox(sandboxManifest(ns, 'healthy'));

      await waitForSandbox(ns, 'healthy', isReady, 'the healthy Sandbox Ready despite its neighbours');

      let sb = await waitForSandbox(ns, 'conflict', readyReason('ReconcilerError'), 'adapter conflict reported');
      assert.equal(
        readyMessage(sb),
        'Error seen: mutate sandbox pod: sandbox.cocoonstack.io/runtime=vk-cocoon conflicts with spec.runtimeClassName',
      );
      assert.equal(condition(sb, 'Ready')?.status, 'False');
      assert.equal(await getPod(ns, 'conflict'), undefined, 'no pod for a rejected runtime');

      sb = await waitForSandbox(ns, 'squatter', readyReason('ReconcilerError'), 'unowned pod reported');
      assert.equal(readyMessage(sb), `Error seen: cannot adopt unowned pod "squatter": ${ADOPT_HINT}`);
      const squatterAfter = await getPod(ns, 'squatter');
      assert.equal(
        squatterAfter?.metadata.resourceVersion !== undefined && squatterAfter.metadata.ownerReferences,
        undefined,
        'not adopted',
      );
      assert.equal(squatterAfter?.metadata.uid, squatter.metadata.uid);

      sb = await waitForSandbox(ns, 'foreign', readyReason('ReconcilerError'), 'foreign pod reported');
      assert.equal(
        readyMessage(sb),
        `Error seen: pod "foreign" is owned by ConfigMap/owner (UID: ${owner.uid}), not by sandbox "foreign"`,
      );
      const foreignAfter = await getPod(ns, 'foreign');
      assert.deepEqual(foreignAfter?.metadata.ownerReferences, foreign.metadata.ownerReferences, 'never touched');
      assert.equal(foreignAfter?.metadata.labels, undefined);

      sb = await waitForSandbox(
        ns,
        'nostorage',
        (s) => condition(s, 'PodScheduled')?.status === 'False',
        'unschedulable pod mirrored',
      );
      assert.deepEqual(conditionTable(sb).Ready, {
        status: 'False',
        reason: 'DependenciesNotReady',
        message: 'Pod exists with phase: Pending',
        observedGeneration: 1,
      });
      assert.equal(condition(sb, 'PodScheduled')?.reason, 'Unschedulable');
      assert.match(condition(sb, 'PodScheduled')?.message ?? '', /unbound immediate PersistentVolumeClaims/);
      const pvc = await getOrUndefined<PersistentVolumeClaim>(PersistentVolumeClaims, ns, 'data-nostorage');
      assert.equal(pvc?.status?.phase, 'Pending');

      // Still reconciling: a Sandbox created after all of that converges too.
      await createSandbox(sandboxManifest(ns, 'late'));
      await waitForSandbox(ns, 'late', isReady, 'a later Sandbox Ready');
    }));

  it('adoption: an unowned pod labelled adoptable=true is adopted in place (§16 5)', () =>
    withOperator('sb-adopt', async ({ ns }) => {
      const client = await testClient();
      const pod = await client.create(
        Pods,
        barePod(ns, 'adoptee', { labels: { 'agents.x-k8s.io/adoptable': 'true' } }),
      );
      const sb = await createSandbox(sandboxManifest(ns, 'adoptee'));
      await waitForSandbox(ns, 'adoptee', isReady, 'Ready with the adopted pod');
      const after = await getPod(ns, 'adoptee');
      assert.equal(after?.metadata.uid, pod.metadata.uid, 'same pod');
      assert.deepEqual(after?.metadata.ownerReferences, [
        {
          apiVersion: 'agents.x-k8s.io/v1beta1',
          kind: 'Sandbox',
          name: 'adoptee',
          uid: sb.metadata.uid,
          controller: true,
          blockOwnerDeletion: true,
        },
      ]);
      assert.equal(after?.metadata.labels?.['agents.x-k8s.io/sandbox-name-hash'], fnv1a32('adoptee'));
      assert.equal(after?.spec.containers[0]?.name, 'c', 'spec untouched');
    }));

  it('services and PVCs: foreign owner and a non-headless unowned Service are refused with the documented messages (§16 5)', () =>
    withOperator('sb-svcown', async ({ ns }) => {
      const client = await testClient();
      const owner = await configMapOwner(ns, 'owner');
      const svc = (name: string, extra: Partial<Service['metadata']>, clusterIP?: string): Service => ({
        apiVersion: 'v1',
        kind: 'Service',
        metadata: { name, namespace: ns, ...extra },
        spec: { ...(clusterIP ? { clusterIP } : {}), ports: [{ port: 80 }], selector: { app: 'x' } },
      });
      await client.create(Services, svc('fsvc', { ownerReferences: [owner] }));
      const withIp = await client.create(Services, svc('ipsvc', { labels: { 'agents.x-k8s.io/adoptable': 'true' } }));
      await client.create<PersistentVolumeClaim>(PersistentVolumeClaims, {
        apiVersion: 'v1',
        kind: 'PersistentVolumeClaim',
        metadata: { name: 'data-fpvc', namespace: ns, ownerReferences: [owner] },
        spec: { accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '1Gi' } } },
      });

      await createSandbox(sandboxManifest(ns, 'fsvc', { service: true }));
      await createSandbox(sandboxManifest(ns, 'ipsvc', { service: true }));
      await createSandbox(
        sandboxManifest(ns, 'fpvc', {
          volumeClaimTemplates: [
            {
              metadata: { name: 'data' },
              spec: { accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '1Gi' } } },
            },
          ],
        }),
      );

      let sb = await waitForSandbox(ns, 'fsvc', readyReason('ReconcilerError'), 'foreign service reported');
      assert.equal(
        readyMessage(sb),
        `Error seen: service "fsvc" is owned by ConfigMap/owner (UID: ${owner.uid}), not by sandbox "fsvc"`,
      );
      assert.deepEqual((await getService(ns, 'fsvc'))?.metadata.ownerReferences, [owner]);
      assert.ok(await getPod(ns, 'fsvc'), 'the pod is still created');

      sb = await waitForSandbox(ns, 'ipsvc', readyReason('ReconcilerError'), 'ClusterIP service reported');
      assert.equal(
        readyMessage(sb),
        `Error seen: cannot adopt service "ipsvc": ClusterIP is "${withIp.spec.clusterIP}" (expected "None", field is immutable)`,
      );
      assert.equal((await getService(ns, 'ipsvc'))?.metadata.ownerReferences, undefined);

      sb = await waitForSandbox(ns, 'fpvc', readyReason('ReconcilerError'), 'foreign PVC reported');
      assert.equal(
        readyMessage(sb),
        `Error seen: PVC "data-fpvc" is owned by ConfigMap/owner (UID: ${owner.uid}), not by sandbox "fpvc"`,
      );
      await eventually(() => getOrUndefined<PersistentVolumeClaim>(PersistentVolumeClaims, ns, 'data-fpvc'), {
        until: (p) => p?.metadata.ownerReferences?.length === 1 && p.metadata.ownerReferences[0]?.uid === owner.uid,
        what: 'PVC left alone',
      });
    }));
});
