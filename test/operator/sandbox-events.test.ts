/**
 * The Sandbox's lifecycle Events (docs/operator.md "Events", agent-sandbox 1.0) on the real control plane (kwok
 * nodes): one per transition, never one per pass — SandboxPodCreated, SandboxReady, SandboxSuspended, SandboxExpired,
 * PodSucceeded (Normal), PodFailed and SandboxPodCreateFailed (Warning) — and none with `--disable-sandbox-events`.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { EventsV1, Pods } from '../../src/kube/index.js';
import { eventName, REPORTING_CONTROLLER } from '../../src/operator/events.js';
import { eventually } from '../support/eventually.js';
import {
  condition,
  createSandbox,
  isReady,
  operatorMetrics,
  patchSandbox,
  readyReason,
  sandboxManifest,
  sumSamples,
  testClient,
  waitForSandbox,
  withOperator,
  type OperatorEnv,
} from './sandbox-fixtures.js';

interface Ev {
  reason: string;
  type: string;
  note: string;
  reportingController: string;
  regarding: { kind: string; name: string; uid: string; apiVersion: string };
}

async function eventsOf(ns: string): Promise<Ev[]> {
  return (await (await testClient()).list<Ev & { metadata: object }>(EventsV1, ns)).items;
}

/** `reason type` of each event about the named Sandbox, sorted (the apiserver lists by generated name). */
async function reasonsFor(ns: string, name: string): Promise<string[]> {
  return (await eventsOf(ns))
    .filter((e) => e.regarding.kind === 'Sandbox' && e.regarding.name === name)
    .map((e) => `${e.reason} ${e.type}`)
    .sort();
}

const setPodPhase = async (ns: string, pod: string, phase: 'Succeeded' | 'Failed') =>
  (await testClient()).patch(Pods, ns, pod, { status: { phase } }, 'merge', { subresource: 'status' });

/**
 * One Sandbox's life: created, Ready, a pass that rewrites its status without a transition, suspended, resumed,
 * its Pod failed, expired. Ends on a status write that follows the last transition's, so any event a transition
 * sent (right after its own status write) has been sent by then.
 */
async function life(ns: string): Promise<void> {
  await createSandbox(sandboxManifest(ns, 'life'));
  await waitForSandbox(ns, 'life', isReady, 'Ready');
  // A pass that writes the status (observedGeneration 2) while Ready stays True: no second SandboxReady.
  await patchSandbox(ns, 'life', { spec: { podTemplate: { metadata: { annotations: { 'example.com/pass': '1' } } } } });
  await waitForSandbox(ns, 'life', (s) => condition(s, 'Ready')?.observedGeneration === 2, 'a second Ready pass');
  await patchSandbox(ns, 'life', { spec: { operatingMode: 'Suspended' } });
  await waitForSandbox(ns, 'life', (s) => condition(s, 'Suspended')?.status === 'True', 'suspended');
  await patchSandbox(ns, 'life', { spec: { operatingMode: 'Running' } });
  await waitForSandbox(ns, 'life', isReady, 'resumed');
  await setPodPhase(ns, 'life', 'Failed');
  await waitForSandbox(ns, 'life', readyReason('PodFailed'), 'PodFailed');
  await patchSandbox(ns, 'life', {
    spec: { shutdownTime: new Date(Date.now() - 1000).toISOString(), shutdownPolicy: 'Retain' },
  });
  // The witness: the expiry teardown's status write (selector cleared) comes after the write that marked it expired.
  await waitForSandbox(
    ns,
    'life',
    (s) => readyReason('SandboxExpired')(s) && !s.status?.selector,
    'expired and torn down',
  );
}

/** A Sandbox whose Pod the apiserver refuses (a container without an image), retried several times. */
async function refusedPod(env: OperatorEnv): Promise<void> {
  const sb = sandboxManifest(env.ns, 'noimage');
  sb.spec.podTemplate.spec.containers = [{ name: 'main' }];
  await createSandbox(sb);
  await waitForSandbox(env.ns, 'noimage', readyReason('ReconcilerError'), 'the Pod create refused');
  // Several passes, each refused the same way: still one event.
  await eventually(() => operatorMetrics(env.op), {
    until: (m) => sumSamples(m, 'controller_runtime_reconcile_errors_total', { controller: 'sandbox' }) >= 3,
    what: 'three refused passes',
    timeoutMs: 60_000,
    intervalMs: 200,
  });
}

describe('Sandbox lifecycle Events', { concurrency: 2 }, () => {
  it('are named as client-go names them: a valid object name, unique, at most 253 characters', () => {
    const name = eventName('web', 1_700_000_000_000);
    assert.match(name, /^web\.[0-9a-f]+$/);
    assert.notEqual(eventName('web', 1_700_000_000_000), name, 'two in one millisecond differ');
    const long = eventName(`${'a'.repeat(240)}.b-c`, 1_700_000_000_000);
    assert.ok(long.length <= 253, `${long.length}`);
    assert.match(long, /^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/);
  });

  it('one per transition, typed as upstream, regarding the Sandbox', () =>
    withOperator('sb-events', async (env) => {
      const { ns } = env;
      await life(ns);
      const expected = [
        'PodFailed Warning',
        'SandboxExpired Normal',
        'SandboxPodCreated Normal',
        'SandboxPodCreated Normal',
        'SandboxReady Normal',
        'SandboxReady Normal',
        'SandboxSuspended Normal',
      ];
      const got = await eventually(() => reasonsFor(ns, 'life'), {
        until: (r) => r.length >= expected.length,
        what: "the events of the Sandbox's life",
        timeoutMs: 30_000,
        intervalMs: 200,
      });
      assert.deepEqual(got, expected);
      const life1 = (await eventsOf(ns)).filter((e) => e.regarding.kind === 'Sandbox' && e.regarding.name === 'life');
      const sb = await waitForSandbox(ns, 'life', () => true, 'the Sandbox');
      for (const e of life1) {
        assert.equal(e.regarding.uid, sb.metadata.uid, JSON.stringify(e));
        assert.equal(e.regarding.apiVersion, 'agents.x-k8s.io/v1beta1');
        assert.equal(e.reportingController, REPORTING_CONTROLLER);
        assert.ok(e.note, `${e.reason} has a note`);
      }

      await createSandbox(sandboxManifest(ns, 'done'));
      await waitForSandbox(ns, 'done', isReady, 'Ready');
      await setPodPhase(ns, 'done', 'Succeeded');
      await waitForSandbox(ns, 'done', readyReason('PodSucceeded'), 'PodSucceeded');
      assert.deepEqual(
        await eventually(() => reasonsFor(ns, 'done'), {
          until: (r) => r.length >= 3,
          what: 'PodSucceeded',
          timeoutMs: 30_000,
          intervalMs: 200,
        }),
        ['PodSucceeded Normal', 'SandboxPodCreated Normal', 'SandboxReady Normal'],
      );

      await refusedPod(env);
      const refused = await eventually(() => reasonsFor(ns, 'noimage'), {
        until: (r) => r.length >= 1,
        what: 'SandboxPodCreateFailed',
        timeoutMs: 30_000,
        intervalMs: 200,
      });
      assert.deepEqual(refused, ['SandboxPodCreateFailed Warning']);
      const note = (await eventsOf(ns)).find((e) => e.reason === 'SandboxPodCreateFailed')?.note ?? '';
      assert.match(note, /Failed to create Pod "noimage": .*image/);
    }));

  it('none with --disable-sandbox-events', () =>
    withOperator(
      'sb-noevents',
      async (env) => {
        await life(env.ns);
        await refusedPod(env);
        assert.deepEqual(
          (await eventsOf(env.ns)).filter((e) => e.regarding.kind === 'Sandbox').map((e) => e.reason),
          [],
        );
      },
      { disableSandboxEvents: true },
    ));
});
