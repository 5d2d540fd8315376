/**
 * Sandbox controller on a real control plane (kwok-simulated nodes): the upstream e2e scenarios marked S that
 * concern Sandbox (TestSimpleSandbox, TestSandboxShutdownTime, TestSandboxRetainedExpiryPreservesFinishedCondition,
 * TestSandboxPodDeletionKeepsSuspendedFalse), status-exact where upstream is, plus spec §16 items 1–4, 6 and 8.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { fnv1a32 } from '../../src/api/index.js';
import { Pods, Sandboxes } from '../../src/kube/index.js';
import { eventually } from '../support/eventually.js';
import {
  condition,
  conditionTable,
  createSandbox,
  getPod,
  getSandbox,
  getService,
  isReady,
  listPods,
  patchSandbox,
  readyReason,
  sandboxManifest,
  testClient,
  waitForSandbox,
  withOperator,
} from './sandbox-fixtures.js';

const HASH = 'agents.x-k8s.io/sandbox-name-hash';
const OWNER = (uid: string | undefined, name: string) => [
  { apiVersion: 'agents.x-k8s.io/v1beta1', kind: 'Sandbox', name, uid, controller: true, blockOwnerDeletion: true },
];

describe('Sandbox controller: lifecycle', { concurrency: 4 }, () => {
  it('TestSimpleSandbox: status exact, pod + headless service owned, metadata propagated (§16 1, 2, 3, 4)', () =>
    withOperator('sb-simple', async ({ ns }) => {
      const created = await createSandbox(sandboxManifest(ns, 'simple', { service: true }));
      const sb = await waitForSandbox(ns, 'simple', isReady, 'Ready');
      assert.deepEqual(conditionTable(sb), {
        Suspended: {
          status: 'False',
          reason: 'NotSuspended',
          message: 'Sandbox is not suspended',
          observedGeneration: 1,
        },
        PodScheduled: { status: 'True', reason: 'PodScheduled', message: '', observedGeneration: 1 },
        Ready: {
          status: 'True',
          reason: 'DependenciesReady',
          message: 'Pod is Ready; Service Exists',
          observedGeneration: 1,
        },
      });
      assert.equal(sb.status?.selector, `${HASH}=1666807f`);
      assert.equal(sb.status?.service, 'simple');
      assert.equal(sb.status?.serviceFQDN, `simple.${ns}.svc.cluster.local`);
      assert.match(sb.status?.nodeName ?? '', /^sim-node-[01]$/);
      assert.equal(sb.status?.podIPs?.length, 1);
      assert.equal(sb.metadata.annotations?.['agents.x-k8s.io/pod-name'], 'simple');

      const pod = await getPod(ns, 'simple');
      assert.deepEqual(pod?.metadata.ownerReferences, OWNER(created.metadata.uid, 'simple'));
      assert.equal(pod?.metadata.labels?.app, 'demo');
      assert.equal(pod?.metadata.labels?.[HASH], '1666807f');
      assert.equal(pod?.metadata.annotations?.['example.com/note'], 'hello');
      assert.equal((await listPods(ns)).length, 1, 'exactly one pod');

      const svc = await getService(ns, 'simple');
      assert.deepEqual(svc?.metadata.ownerReferences, OWNER(created.metadata.uid, 'simple'));
      assert.equal(svc?.spec.clusterIP, 'None');
      assert.deepEqual(svc?.spec.selector, { [HASH]: '1666807f' });
      assert.deepEqual(svc?.metadata.labels, { [HASH]: '1666807f' });
      assert.deepEqual(
        svc?.spec.ports?.map((p) => [p.name, p.port, p.protocol, p.targetPort]),
        [['http', 8888, 'TCP', 8888]],
      );
    }));

  it('spec.service: unset creates none; true creates; false deletes the owned Service and clears status (§16 4)', () =>
    withOperator('sb-svc', async ({ ns }) => {
      await createSandbox(sandboxManifest(ns, 'svc'));
      let sb = await waitForSandbox(ns, 'svc', isReady, 'Ready without a service');
      assert.equal(condition(sb, 'Ready')?.message, 'Pod is Ready');
      assert.equal(await getService(ns, 'svc'), undefined);
      assert.equal(sb.status?.service, undefined);

      await patchSandbox(ns, 'svc', { spec: { service: true } });
      sb = await waitForSandbox(
        ns,
        'svc',
        (s) => condition(s, 'Ready')?.message === 'Pod is Ready; Service Exists',
        'service in use',
      );
      assert.equal(sb.status?.serviceFQDN, `svc.${ns}.svc.cluster.local`);
      assert.ok(await getService(ns, 'svc'));

      await patchSandbox(ns, 'svc', { spec: { service: false } });
      sb = await waitForSandbox(
        ns,
        'svc',
        (s) => condition(s, 'Ready')?.message === 'Pod is Ready' && !s.status?.service,
        'service released',
      );
      assert.equal(sb.status?.serviceFQDN, undefined);
      await eventually(() => getService(ns, 'svc'), {
        until: (s) => s === undefined || !!s.metadata.deletionTimestamp,
        what: 'service deleted',
      });
    }));

  it('reserved prefixes never reach the Pod; template label/annotation edits are live-synced, spec is not (§16 6)', () =>
    withOperator('sb-meta', async ({ ns }) => {
      const m = sandboxManifest(ns, 'meta');
      m.spec.podTemplate.metadata = {
        labels: { team: 'a', drop: 'me', 'agents.x-k8s.io/claim-uid': 'x', 'extensions.agents.x-k8s.io/k': 'v' },
        annotations: {
          'opentelemetry.io/trace-context': '{}',
          'agents.x-k8s.io/pod-name': 'evil',
          'example.com/a': '1',
        },
      };
      await createSandbox(m);
      await waitForSandbox(ns, 'meta', isReady, 'Ready');
      let pod = await getPod(ns, 'meta');
      assert.deepEqual(pod?.metadata.labels, { team: 'a', drop: 'me', [HASH]: fnv1a32('meta') });
      assert.deepEqual(Object.keys(pod?.metadata.annotations ?? {}).sort(), [
        'agents.x-k8s.io/propagated-annotations',
        'agents.x-k8s.io/propagated-labels',
        'example.com/a',
      ]);
      const uid = pod?.metadata.uid;
      await patchSandbox(ns, 'meta', {
        spec: {
          podTemplate: {
            metadata: { labels: { team: 'b', drop: null, added: 'yes' }, annotations: { 'example.com/a': null } },
            spec: { containers: [{ name: 'main', image: 'registry.k8s.io/pause:3.9' }] },
          },
        },
      });
      pod = await eventually(() => getPod(ns, 'meta'), {
        until: (p) => p?.metadata.labels?.team === 'b',
        what: 'labels synced',
      });
      assert.equal(pod?.metadata.labels?.drop, undefined);
      assert.equal(pod?.metadata.labels?.added, 'yes');
      assert.equal(pod?.metadata.annotations?.['example.com/a'], undefined);
      assert.equal(pod?.metadata.annotations?.['agents.x-k8s.io/propagated-labels'], 'added,team');
      assert.equal(pod?.metadata.annotations?.['agents.x-k8s.io/propagated-annotations'], '');
      assert.equal(pod?.metadata.uid, uid, 'pod not recreated');
      assert.equal(pod?.spec.containers[0]?.image, 'registry.k8s.io/pause:3.10', 'pod spec is never reconciled');
    }));

  it('TestSandboxPodDeletionKeepsSuspendedFalse: a deleted pod is recreated (same name, new UID) (§16 1)', () =>
    withOperator('sb-podel', async ({ ns }) => {
      await createSandbox(sandboxManifest(ns, 'podel'));
      await waitForSandbox(ns, 'podel', isReady, 'Ready');
      const first = await getPod(ns, 'podel');
      const client = await testClient();
      await client.delete(Pods, ns, 'podel');
      const second = await eventually(() => getPod(ns, 'podel'), {
        until: (p) => !!p && p.metadata.uid !== first?.metadata.uid,
        what: 'pod recreated',
      });
      assert.ok(second);
      const sb = await waitForSandbox(ns, 'podel', (s) => isReady(s) && s.status?.podIPs?.length === 1, 'Ready again');
      assert.equal(condition(sb, 'Suspended')?.reason, 'NotSuspended');
      assert.equal((await listPods(ns)).filter((p) => !p.metadata.deletionTimestamp).length, 1);
    }));

  it('TestSandboxShutdownTime (Retain): expiry persisted at the deadline, pod + service deleted, status reduced (§16 8)', () =>
    withOperator('sb-exp', async ({ ns }) => {
      await createSandbox(sandboxManifest(ns, 'exp', { service: true }));
      await waitForSandbox(ns, 'exp', isReady, 'Ready');
      const deadline = Date.now() + 3_000;
      await patchSandbox(ns, 'exp', {
        spec: { shutdownTime: new Date(deadline).toISOString().replace(/\.\d+Z$/, 'Z') },
      });
      const deadlineS = Math.floor(deadline / 1000) * 1000;
      const sb = await waitForSandbox(ns, 'exp', readyReason('SandboxExpired'), 'expired', 10_000);
      const ltt = Date.parse(condition(sb, 'Ready')!.lastTransitionTime);
      assert.ok(ltt >= deadlineS, `expired at ${ltt}, deadline ${deadlineS}`);
      const done = await waitForSandbox(
        ns,
        'exp',
        (s) => !s.status?.selector && !condition(s, 'PodScheduled'),
        'status reduced',
      );
      assert.deepEqual(conditionTable(done), {
        Suspended: {
          status: 'False',
          reason: 'NotSuspended',
          message: 'Sandbox is not suspended',
          observedGeneration: 2,
        },
        Ready: { status: 'False', reason: 'SandboxExpired', message: 'Sandbox has expired', observedGeneration: 2 },
      });
      assert.deepEqual(Object.keys(done.status ?? {}), ['conditions']);
      await eventually(() => getPod(ns, 'exp'), { until: (p) => p === undefined, what: 'pod deleted' });
      await eventually(() => getService(ns, 'exp'), {
        until: (s) => s === undefined || !!s.metadata.deletionTimestamp,
        what: 'service deleted',
      });

      // Clearing shutdownTime resumes normal reconciliation: the pod comes back.
      await patchSandbox(ns, 'exp', { spec: { shutdownTime: null } });
      await waitForSandbox(ns, 'exp', isReady, 'Ready after the deadline was cleared');
    }));

  it('shutdownPolicy Delete removes the Sandbox (children follow through the garbage collector) (§16 8)', () =>
    withOperator('sb-expdel', async ({ ns }) => {
      const past = new Date(Date.now() - 1000).toISOString().replace(/\.\d+Z$/, 'Z');
      await createSandbox(sandboxManifest(ns, 'gone', { shutdownTime: past, shutdownPolicy: 'Delete' }));
      await eventually(
        async () =>
          (await testClient()).get(Sandboxes, ns, 'gone').then(
            () => 'present',
            () => 'gone',
          ),
        {
          until: (v) => v === 'gone',
          what: 'sandbox deleted',
        },
      );
      assert.equal(await getPod(ns, 'gone'), undefined, 'an already-expired Sandbox never gets a pod');
    }));

  it('TestSandboxRetainedExpiryPreservesFinishedCondition: Finished mirrors a Succeeded pod and survives expiry', () =>
    withOperator('sb-fin', async ({ ns }) => {
      await createSandbox(sandboxManifest(ns, 'fin'));
      await waitForSandbox(ns, 'fin', isReady, 'Ready');
      // kwok completes only Job pods; stand in for the kubelet and report the container's exit.
      await (
        await testClient()
      ).patch(Pods, ns, 'fin', { status: { phase: 'Succeeded' } }, 'merge', { subresource: 'status' });
      let sb = await waitForSandbox(ns, 'fin', (s) => condition(s, 'Finished')?.status === 'True', 'Finished');
      assert.deepEqual(conditionTable(sb).Finished, {
        status: 'True',
        reason: 'PodSucceeded',
        message: 'Pod completed successfully',
        observedGeneration: 1,
      });
      assert.deepEqual(conditionTable(sb).Ready, {
        status: 'False',
        reason: 'PodSucceeded',
        message: 'Pod completed successfully',
        observedGeneration: 1,
      });
      await patchSandbox(ns, 'fin', {
        spec: { shutdownTime: new Date(Date.now() - 1000).toISOString().replace(/\.\d+Z$/, 'Z') },
      });
      sb = await waitForSandbox(
        ns,
        'fin',
        (s) => readyReason('SandboxExpired')(s) && !s.status?.selector,
        'expired + reduced',
      );
      assert.deepEqual(conditionTable(sb).Finished, {
        status: 'True',
        reason: 'PodSucceeded',
        message: 'Pod completed successfully',
        observedGeneration: 1,
      });
      await eventually(() => getPod(ns, 'fin'), { until: (p) => p === undefined, what: 'pod deleted' });
      assert.equal((await getSandbox(ns, 'fin')).metadata.deletionTimestamp, undefined, 'Retain keeps the Sandbox');
    }));
});
