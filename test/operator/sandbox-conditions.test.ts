import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  computeStatus,
  readyCondition,
  setCondition,
  type Observation,
  type Pod,
} from '../../src/operator/sandbox/index.js';

const T0 = '2026-01-01T00:00:00.000Z';
const T1 = '2026-01-01T00:00:05.000Z';
const pod = (phase: string, ready = true, ips = ['10.0.0.1']): Pod => ({
  metadata: { name: 'p' },
  spec: { containers: [], nodeName: 'n1' },
  status: {
    phase,
    conditions: [
      { type: 'Ready', status: ready ? 'True' : 'False' },
      { type: 'PodScheduled', status: 'True' },
    ],
    podIPs: ips.map((ip) => ({ ip })),
  },
});
const obs = (o: Partial<Observation> = {}): Observation => ({
  generation: 3,
  suspended: false,
  pod: pod('Running'),
  podOwned: true,
  errors: [],
  serviceRequired: false,
  serviceExists: false,
  service: undefined,
  selector: 'agents.x-k8s.io/sandbox-name-hash=1',
  ...o,
});

describe('sandbox conditions: Ready table (§6.5 + §13)', () => {
  const cases: Array<[string, Partial<Observation>, string, string, string]> = [
    ['ready pod, no service', {}, 'True', 'DependenciesReady', 'Pod is Ready'],
    [
      'ready pod + required service present',
      { serviceRequired: true, serviceExists: true },
      'True',
      'DependenciesReady',
      'Pod is Ready; Service Exists',
    ],
    [
      'ready pod + required service missing',
      { serviceRequired: true },
      'False',
      'DependenciesNotReady',
      'Pod is Ready; Service does not exist',
    ],
    ['no pod', { pod: undefined, podOwned: false }, 'False', 'DependenciesNotReady', 'Pod does not exist'],
    ['pending', { pod: pod('Pending', false, []) }, 'False', 'DependenciesNotReady', 'Pod exists with phase: Pending'],
    [
      'running not ready',
      { pod: pod('Running', false) },
      'False',
      'DependenciesNotReady',
      'Pod is Running but not Ready',
    ],
    [
      'ready without IPs',
      { pod: pod('Running', true, []) },
      'False',
      'DependenciesNotReady',
      'Pod is Ready but has no podIPs yet',
    ],
    ['succeeded', { pod: pod('Succeeded', false) }, 'False', 'PodSucceeded', 'Pod completed successfully'],
    ['failed', { pod: pod('Failed', false) }, 'False', 'PodFailed', 'Pod failed'],
    ['suspended, pod gone', { suspended: true, pod: undefined }, 'False', 'SandboxSuspended', 'Sandbox is suspended'],
    ['suspended, pod still there', { suspended: true }, 'False', 'SandboxSuspended', 'Sandbox is suspending'],
    ['child errors first', { errors: ['a', 'b'], suspended: true }, 'False', 'ReconcilerError', 'Error seen: a\nb'],
    [
      'multiple pods',
      { multiplePods: 2, pod: undefined },
      'False',
      'MultiplePods',
      'multiple Pods (2) are controlled by this Sandbox; refusing to choose or create a Pod',
    ],
  ];
  for (const [name, o, status, reason, message] of cases)
    it(name, () => {
      assert.deepEqual(readyCondition(obs(o)), { type: 'Ready', status, reason, message, observedGeneration: 3 });
    });
});

describe('sandbox conditions: status', () => {
  it('running: Suspended False/NotSuspended, PodScheduled mirrored (empty reason → PodScheduled), pod fields', () => {
    const s = computeStatus(undefined, obs({ service: { name: 'sb', fqdn: 'sb.ns.svc.cluster.local' } }), T0);
    assert.deepEqual(
      s.conditions?.map((c) => [c.type, c.status, c.reason, c.message]),
      [
        ['Suspended', 'False', 'NotSuspended', 'Sandbox is not suspended'],
        ['PodScheduled', 'True', 'PodScheduled', ''],
        ['Ready', 'True', 'DependenciesReady', 'Pod is Ready'],
      ],
    );
    assert.deepEqual(
      { selector: s.selector, podIPs: s.podIPs, nodeName: s.nodeName, service: s.service, fqdn: s.serviceFQDN },
      {
        selector: 'agents.x-k8s.io/sandbox-name-hash=1',
        podIPs: ['10.0.0.1'],
        nodeName: 'n1',
        service: 'sb',
        fqdn: 'sb.ns.svc.cluster.local',
      },
    );
  });

  it('lastTransitionTime moves only when the status flips; recomputing is a no-op', () => {
    const s0 = computeStatus(undefined, obs(), T0);
    assert.deepEqual(computeStatus(s0, obs(), T1), s0);
    const s1 = computeStatus(s0, obs({ pod: pod('Running', false) }), T1);
    const ready = s1.conditions?.find((c) => c.type === 'Ready');
    assert.equal(ready?.lastTransitionTime, T1);
    assert.equal(s1.conditions?.find((c) => c.type === 'Suspended')?.lastTransitionTime, T0);
  });

  it('suspended states: terminating, terminated, not owned; selector kept, pod fields cleared', () => {
    const s0 = computeStatus(undefined, obs(), T0);
    const terminating = computeStatus(s0, obs({ suspended: true, suspendedState: 'PodTerminating' }), T1);
    assert.deepEqual(terminating.conditions?.find((c) => c.type === 'Suspended')?.reason, 'PodTerminating');
    const gone = computeStatus(
      terminating,
      obs({ suspended: true, suspendedState: 'PodTerminated', pod: undefined, podOwned: false }),
      T1,
    );
    assert.deepEqual(
      gone.conditions?.map((c) => [c.type, c.status, c.reason]),
      [
        ['Suspended', 'True', 'PodTerminated'],
        ['Ready', 'False', 'SandboxSuspended'],
      ],
    );
    assert.equal(gone.selector, 'agents.x-k8s.io/sandbox-name-hash=1');
    assert.equal(gone.podIPs, undefined);
    assert.equal(gone.nodeName, undefined);
    const blocked = computeStatus(
      undefined,
      obs({ suspended: true, suspendedState: 'PodNotOwned', podOwned: false }),
      T0,
    );
    assert.deepEqual(
      blocked.conditions?.map((c) => [c.type, c.status, c.reason, c.message]),
      [
        ['Suspended', 'False', 'PodNotOwned', 'Refused to delete pod because it is not owned by this sandbox'],
        ['Ready', 'False', 'SandboxSuspended', 'Sandbox is suspending'],
      ],
    );
    assert.equal(blocked.podIPs, undefined, 'podIPs only from owned pods');
  });

  it('Finished mirrors a terminal owned pod and is removed otherwise', () => {
    const done = computeStatus(undefined, obs({ pod: pod('Succeeded', false) }), T0);
    assert.deepEqual(
      done.conditions?.find((c) => c.type === 'Finished'),
      {
        type: 'Finished',
        status: 'True',
        reason: 'PodSucceeded',
        message: 'Pod completed successfully',
        observedGeneration: 3,
        lastTransitionTime: T0,
      },
    );
    const again = computeStatus(done, obs(), T1);
    assert.equal(
      again.conditions?.find((c) => c.type === 'Finished'),
      undefined,
    );
  });

  it('setCondition keeps position and updates reason/message/generation in place', () => {
    const c = setCondition(
      [{ type: 'A', status: 'True', reason: 'X', message: 'x', lastTransitionTime: T0 }],
      { type: 'A', status: 'True', reason: 'Y', message: 'y', observedGeneration: 2 },
      T1,
    );
    assert.deepEqual(c, [
      { type: 'A', status: 'True', reason: 'Y', message: 'y', observedGeneration: 2, lastTransitionTime: T0 },
    ]);
  });
});
