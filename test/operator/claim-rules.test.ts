/** Unit tests (no cluster) of the claim's pure rules: injection (§9.8), lifecycle clock and status (§9.1, §9.5), the L1 queue (§9.3). */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Condition, PodSpec, Sandbox, SandboxClaim } from '../../src/api/index.js';
import { CandidateQueues } from '../../src/operator/extensions/candidates.js';
import { claimStatusFor, timeLeft } from '../../src/api/claim-status.js';
import {
  ClaimInputError,
  injectEnv,
  mergePodMetadata,
  mergeVolumeClaimTemplates,
  validateAdditionalPodMetadata,
} from '../../src/api/claim-injection.js';
import { rfc3339Nano } from '../../src/operator/extensions/claim-writes.js';

const DOMAINS = ['sandbox.users.io'];

describe('additionalPodMetadata validation', () => {
  const cases: Array<[string, { labels?: Record<string, string>; annotations?: Record<string, string> }, boolean]> = [
    ['allowed label domain', { labels: { 'sandbox.users.io/team': 'a' } }, true],
    ['allowed sub-domain', { labels: { 'x.sandbox.users.io/team': 'a' } }, true],
    ['unprefixed label', { labels: { team: 'a' } }, false],
    ['label outside allow-list', { labels: { 'example.com/team': 'a' } }, false],
    ['app=sandbox-router', { labels: { app: 'Sandbox-Router' } }, false],
    ['invalid label value', { labels: { 'sandbox.users.io/team': 'a b' } }, false],
    ['plain annotation', { annotations: { note: 'x' } }, true],
    ['foreign annotation domain', { annotations: { 'example.com/note': 'x' } }, true],
    ['kubernetes.io annotation', { annotations: { 'kubernetes.io/x': 'y' } }, false],
    ['k8s.io sub-domain annotation', { annotations: { 'foo.k8s.io/x': 'y' } }, false],
    ['agents.x-k8s.io annotation', { annotations: { 'agents.x-k8s.io/x': 'y' } }, false],
    ['not a qualified name', { annotations: { 'a/b/c': 'y' } }, false],
  ];
  for (const [name, md, ok] of cases)
    it(name, () => {
      if (ok) validateAdditionalPodMetadata(md, DOMAINS);
      else
        assert.throws(
          () => validateAdditionalPodMetadata(md, DOMAINS),
          (e: unknown) => e instanceof ClaimInputError && e.reason === 'InvalidMetadata',
        );
    });

  it('merge rejects conflicting values with the documented message', () => {
    assert.throws(
      () => mergePodMetadata({ labels: { a: '1' } }, { labels: { a: '2' } }),
      /metadata override conflict: label "a" is defined in template with value "1", but claim requests "2"/,
    );
    assert.deepEqual(
      mergePodMetadata({ labels: { a: '1' } }, { labels: { a: '1', b: '2' }, annotations: { c: '3' } }),
      { labels: { a: '1', b: '2' }, annotations: { c: '3' } },
    );
  });
});

describe('env injection', () => {
  const spec = (): PodSpec => ({ containers: [{ name: 'main', env: [{ name: 'A', value: '1' }] }, { name: 'side' }] });
  it('Disallowed (and unset) rejects any env', () => {
    for (const p of ['Disallowed', undefined] as const)
      assert.throws(
        () => injectEnv(spec(), [{ name: 'B', value: '2' }], p),
        (e: unknown) => e instanceof ClaimInputError && e.reason === 'EnvVarsInjectionRejected',
      );
  });
  it('Allowed appends new names to containers[0], rejects overrides and envFrom', () => {
    assert.deepEqual(injectEnv(spec(), [{ name: 'B', value: '2' }], 'Allowed').containers[0]!.env, [
      { name: 'A', value: '1' },
      { name: 'B', value: '2' },
    ]);
    assert.throws(
      () => injectEnv(spec(), [{ name: 'A', value: '2' }], 'Allowed'),
      (e: unknown) => !(e instanceof ClaimInputError),
    );
    const withEnvFrom: PodSpec = { containers: [{ name: 'main', envFrom: [{ configMapRef: { name: 'x' } }] }] };
    assert.throws(
      () => injectEnv(withEnvFrom, [{ name: 'B', value: '2' }], 'Allowed'),
      (e: unknown) => e instanceof ClaimInputError,
    );
  });
  it('Overrides replaces in place and appends; containerName targets a container', () => {
    const out = injectEnv(
      spec(),
      [
        { name: 'A', value: '9' },
        { name: 'C', value: '3', containerName: 'side' },
      ],
      'Overrides',
    );
    assert.deepEqual(out.containers[0]!.env, [{ name: 'A', value: '9' }]);
    assert.deepEqual(out.containers[1]!.env, [{ name: 'C', value: '3' }]);
    assert.throws(
      () => injectEnv(spec(), [{ name: 'X', value: '1', containerName: 'nope' }], 'Overrides'),
      /not found/,
    );
  });
});

describe('volumeClaimTemplates merge', () => {
  const v = (name: string, size = '1Gi') => ({
    metadata: { name },
    spec: { resources: { requests: { storage: size } } },
  });
  const isVctError = (e: unknown) => e instanceof ClaimInputError && e.reason === 'VolumeClaimTemplatesError';
  it('rejects claim VCTs under Disallowed/unset, duplicate and empty names', () => {
    assert.throws(() => mergeVolumeClaimTemplates([], [v('a')], 'Disallowed'), isVctError);
    assert.throws(() => mergeVolumeClaimTemplates([], [v('a')], undefined), isVctError);
    assert.throws(() => mergeVolumeClaimTemplates([], [v('a'), v('a')], 'Allowed'), isVctError);
    assert.throws(() => mergeVolumeClaimTemplates([], [{ spec: {} }], 'Allowed'), isVctError);
    assert.throws(() => mergeVolumeClaimTemplates([v('a'), v('a')], undefined, 'Allowed'), isVctError);
  });
  it('Allowed appends and refuses collisions; Overrides replaces', () => {
    assert.deepEqual(mergeVolumeClaimTemplates([v('a')], [v('b')], 'Allowed'), [v('a'), v('b')]);
    assert.throws(() => mergeVolumeClaimTemplates([v('a')], [v('a', '2Gi')], 'Allowed'), isVctError);
    assert.deepEqual(mergeVolumeClaimTemplates([v('a')], [v('a', '2Gi'), v('c')], 'Overrides'), [
      v('a', '2Gi'),
      v('c'),
    ]);
  });
});

describe('claim lifecycle clock', () => {
  const fin = (ltt: string): Condition[] => [
    { type: 'Finished', status: 'True', reason: 'PodSucceeded', message: '', lastTransitionTime: ltt },
  ];
  const now = Date.parse('2026-01-01T00:01:00Z');
  const cases: Array<[string, Parameters<typeof timeLeft>[0], Condition[] | undefined, boolean, number | undefined]> = [
    ['no lifecycle', undefined, undefined, false, undefined],
    ['shutdownTime ahead', { shutdownTime: '2026-01-01T00:02:00Z' }, undefined, false, 60_000],
    ['shutdownTime passed', { shutdownTime: '2026-01-01T00:00:00Z' }, undefined, true, 0],
    ['ttl without Finished', { ttlSecondsAfterFinished: 0 }, undefined, false, undefined],
    [
      'ttl after Finished, earlier than shutdownTime',
      { shutdownTime: '2026-01-01T01:00:00Z', ttlSecondsAfterFinished: 30 },
      fin('2026-01-01T00:00:50Z'),
      false,
      20_000,
    ],
    ['ttl 0 after Finished', { ttlSecondsAfterFinished: 0 }, fin('2026-01-01T00:00:50Z'), true, 0],
  ];
  for (const [name, lc, conds, expired, left] of cases)
    it(name, () => assert.deepEqual(timeLeft(lc, conds, now), { expired, leftMs: left }));
});

describe('claim status', () => {
  const claim = (status?: SandboxClaim['status']): SandboxClaim => ({
    metadata: { name: 'c', generation: 3 },
    spec: { warmPoolRef: { name: 'p' } },
    status,
  });
  const sb = (conds: Condition[], ips?: string[]): Sandbox => ({
    metadata: { name: 'p-abc' },
    spec: { podTemplate: { spec: { containers: [] } } },
    status: { conditions: conds, ...(ips ? { podIPs: ips } : {}) },
  });
  const NOW = '2026-01-01T00:00:00Z';
  const ready: Condition = {
    type: 'Ready',
    status: 'True',
    reason: 'DependenciesReady',
    message: 'Pod is Ready',
    lastTransitionTime: '2025-12-31T00:00:00Z',
    observedGeneration: 7,
  };
  it("mirrors the Sandbox Ready condition (observedGeneration: the claim's), Finished verbatim, and records name/podIPs", () => {
    const finished: Condition = {
      type: 'Finished',
      status: 'True',
      reason: 'PodSucceeded',
      message: '',
      lastTransitionTime: NOW,
    };
    const s = claimStatusFor(claim(), { kind: 'sandbox', sandbox: sb([ready, finished], ['10.0.0.1']) }, NOW);
    assert.deepEqual(s, {
      conditions: [finished, { ...ready, observedGeneration: 3 }],
      sandbox: { name: 'p-abc', podIPs: ['10.0.0.1'] },
    });
  });
  const table: Array<[string, Parameters<typeof claimStatusFor>[1], string, string]> = [
    ['no Ready on the Sandbox', { kind: 'sandbox', sandbox: sb([]) }, 'SandboxNotReady', 'Sandbox is not ready'],
    [
      'Sandbox expired',
      { kind: 'sandbox', sandbox: sb([{ ...ready, status: 'False', reason: 'SandboxExpired' }]) },
      'SandboxExpired',
      'Underlying Sandbox resource has expired independently of the Claim.',
    ],
    ['no Sandbox', { kind: 'noSandbox' }, 'SandboxMissing', 'Sandbox does not exist'],
    [
      'claim expired',
      { kind: 'expired', sandbox: undefined },
      'ClaimExpired',
      'Claim expired. Sandbox cleanup initiated.',
    ],
    [
      'pool missing',
      { kind: 'error', reason: 'WarmPoolNotFound', message: 'SandboxWarmPool "p" not found', keepSandboxStatus: true },
      'WarmPoolNotFound',
      'SandboxWarmPool "p" not found',
    ],
  ];
  for (const [name, outcome, reason, message] of table)
    it(name, () => {
      const r = claimStatusFor(claim(), outcome, NOW).conditions!.find((c) => c.type === 'Ready')!;
      assert.deepEqual(r, {
        type: 'Ready',
        status: 'False',
        reason,
        message,
        observedGeneration: 3,
        lastTransitionTime: NOW,
      });
    });
  it('keeps lastTransitionTime while the status does not change', () => {
    const prev = claimStatusFor(claim(), { kind: 'noSandbox' }, '2025-01-01T00:00:00Z');
    const next = claimStatusFor(
      claim(prev),
      { kind: 'error', reason: 'WarmPoolNotFound', message: 'x', keepSandboxStatus: true },
      NOW,
    );
    assert.equal(next.conditions![0]!.lastTransitionTime, '2025-01-01T00:00:00Z');
  });
});

describe('L1 candidate queue', () => {
  it('prefers Ready entries on the fullest node, then unscheduled Ready, then not-Ready FIFO', () => {
    const q = new CandidateQueues();
    q.observe('ns', 'nr', 'p', 'n1', false);
    q.observe('ns', 'u', 'p', '', true);
    q.observe('ns', 'a1', 'p', 'n1', true);
    q.observe('ns', 'b1', 'p', 'n2', true);
    q.observe('ns', 'b2', 'p', 'n2', true);
    const order = [];
    for (;;) {
      const got = q.take('ns', 'p');
      if (!got) break;
      order.push(got.name);
      q.settle('ns', got.name);
    }
    assert.deepEqual(order, ['b1', 'a1', 'b2', 'u', 'nr']);
  });
  it('withdraws entries that stop being adoptable and never re-offers one in flight', () => {
    const q = new CandidateQueues();
    q.observe('ns', 'a', 'p', 'n', true);
    q.observe('ns', 'b', 'p', 'n', true);
    q.observe('ns', 'b', undefined, 'n', true);
    const got = q.take('ns', 'p')!;
    assert.equal(got.name, 'a');
    q.observe('ns', 'a', 'p', 'n', true); // an event while the adoption is in flight
    assert.equal(q.take('ns', 'p'), undefined);
    q.settle('ns', 'a');
    q.observe('ns', 'a', 'p', 'n', true);
    assert.equal(q.take('ns', 'p')?.name, 'a');
    q.forget('ns', 'a');
    assert.equal(q.size('ns', 'p'), 0);
  });
});

describe('controller-first-observed-at', () => {
  it('is RFC3339 with non-zero sub-second digits', () => {
    const v = rfc3339Nano();
    assert.match(v, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{1,9}Z$/);
    assert.ok(!/\.0+Z$/.test(v));
  });
});
