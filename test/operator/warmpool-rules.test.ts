/** Unit tests (no cluster) of the warm pool's pure parts: member shape (§8 step 5), drift (§8 step 2), incremental accounting. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { AnnotationKeys, fnv1a32, LabelKeys } from '../../src/api/index.js';
import { blueprintHash, matchesTemplate, withSecureDefaults } from '../../src/operator/extensions/blueprint.js';
import { PoolMembership } from '../../src/operator/extensions/pool-members.js';
import type { PoolObj, SandboxObj, TemplateObj } from '../../src/operator/extensions/support.js';
import { buildWarmMember } from '../../src/operator/extensions/warm-pool-controller.js';

const template = (spec: Partial<TemplateObj['spec']> = {}): TemplateObj => ({
  metadata: { name: 'tpl', namespace: 'ns' },
  spec: {
    podTemplate: { metadata: { labels: { app: 'x' } }, spec: { containers: [{ name: 'main', image: 'pause' }] } },
    ...spec,
  },
});
const pool: PoolObj = {
  metadata: { name: 'pool', namespace: 'ns', uid: 'pool-uid' },
  spec: { sandboxTemplateRef: { name: 'tpl' } },
};

describe('warm member', () => {
  it('carries the §16 item 11 labels, annotation, owner and secure defaults', () => {
    const t = template();
    const sb = buildWarmMember(pool, t, blueprintHash(t), true);
    assert.match(sb.metadata!.name!, /^pool-[bcdfghjklmnpqrstvwxz2456789]{5}$/);
    assert.deepEqual(sb.metadata!.labels, {
      [LabelKeys.warmPoolSandbox]: fnv1a32('pool'),
      [LabelKeys.sandboxTemplateRefHash]: fnv1a32('tpl'),
      [LabelKeys.sandboxTemplateHash]: blueprintHash(t),
      [LabelKeys.launchType]: 'warm',
      [LabelKeys.createdBy]: 'controller',
    });
    // Named by the pool, so the pod-name annotation is there from the start (no patch after the Pod is created).
    assert.deepEqual(sb.metadata!.annotations, {
      [AnnotationKeys.sandboxTemplateRef]: 'tpl',
      [AnnotationKeys.podName]: sb.metadata!.name,
    });
    assert.equal(sb.metadata!.ownerReferences![0]!.uid, 'pool-uid');
    assert.equal(sb.spec.podTemplate.metadata?.annotations?.[AnnotationKeys.safeToEvict], 'true');
    assert.equal(sb.spec.podTemplate.metadata?.labels?.app, 'x');
    assert.equal(sb.spec.podTemplate.spec.automountServiceAccountToken, false);
    assert.equal(sb.spec.podTemplate.spec.dnsPolicy, 'None');
  });
  it('leaves safe-to-evict alone when the template sets it, or eviction is off', () => {
    const t = template({
      podTemplate: { metadata: { annotations: { [AnnotationKeys.safeToEvict]: 'false' } }, spec: { containers: [] } },
    });
    assert.equal(
      buildWarmMember(pool, t, 'h', true).spec.podTemplate.metadata?.annotations?.[AnnotationKeys.safeToEvict],
      'false',
    );
    assert.equal(
      buildWarmMember(pool, template(), 'h', false).spec.podTemplate.metadata?.annotations?.[
        AnnotationKeys.safeToEvict
      ],
      undefined,
    );
  });
});

describe('secure defaults', () => {
  const spec = { containers: [] };
  const cases: Array<[string, Partial<TemplateObj['spec']>, object, boolean]> = [
    ['managed default policy: DNS override', {}, {}, true],
    ['user network policy: no DNS override', { networkPolicy: { egress: [] } }, {}, false],
    ['unmanaged: no DNS override', { networkPolicyManagement: 'Unmanaged' }, {}, false],
    ['explicit dnsPolicy kept', {}, { dnsPolicy: 'ClusterFirst' }, false],
  ];
  for (const [name, tplSpec, extra, dns] of cases)
    it(name, () => {
      const out = withSecureDefaults({ ...spec, ...extra }, template(tplSpec));
      assert.equal(out.automountServiceAccountToken, false);
      assert.equal(out.dnsPolicy === 'None', dns);
    });
  it('keeps an explicit automountServiceAccountToken', () => {
    assert.equal(
      withSecureDefaults({ containers: [], automountServiceAccountToken: true }, template())
        .automountServiceAccountToken,
      true,
    );
  });
});

describe('drift', () => {
  const t = template();
  const member = (): SandboxObj => buildWarmMember(pool, t, blueprintHash(t), true) as SandboxObj;
  it('a fresh member matches; pod-template metadata never makes it stale', () => {
    const m = member();
    assert.ok(matchesTemplate(m, t));
    m.spec.podTemplate.metadata = { labels: { other: 'y' } };
    assert.ok(matchesTemplate(m, t));
  });
  it('pod spec, VCT and service changes are drift', () => {
    assert.ok(
      !matchesTemplate(
        member(),
        template({ podTemplate: { spec: { containers: [{ name: 'main', image: 'other' }] } } }),
      ),
    );
    assert.ok(!matchesTemplate(member(), template({ service: true })));
    assert.ok(!matchesTemplate(member(), template({ volumeClaimTemplates: [{ metadata: { name: 'w' }, spec: {} }] })));
  });
});

describe('incremental membership', () => {
  const sb = (name: string, extra: Partial<SandboxObj['metadata']> = {}, ready = false): SandboxObj => {
    const m = buildWarmMember(pool, template(), 'h', true) as SandboxObj;
    m.metadata = { ...m.metadata, name, ...extra };
    if (ready)
      m.status = {
        conditions: [
          { type: 'Ready', status: 'True', reason: 'R', message: '', lastTransitionTime: '2026-01-01T00:00:00Z' },
        ],
      };
    return m;
  };
  it('counts members and ready members from events; adoption and deletion remove them', () => {
    const m = new PoolMembership();
    m.expect('pool-uid', 'adds', 2);
    assert.ok(!m.satisfied('pool-uid'));
    const a = sb('a');
    const b = sb('b');
    m.observe(undefined, a);
    m.observe(undefined, b);
    assert.ok(m.satisfied('pool-uid'));
    const aReady = sb('a', {}, true);
    m.observe(a, aReady);
    let s = m.get('pool-uid');
    assert.deepEqual([s.members.size, s.ready.size, s.notReady.size], [2, 1, 1]);
    // adopted: label removed, controller changed
    const adopted = structuredClone(aReady);
    adopted.metadata.labels = {};
    adopted.metadata.ownerReferences = [
      { apiVersion: 'extensions.agents.x-k8s.io/v1beta1', kind: 'SandboxClaim', name: 'c', uid: 'c', controller: true },
    ];
    m.observe(aReady, adopted);
    m.expect('pool-uid', 'dels', 1);
    m.observe(b, sb('b', { deletionTimestamp: '2026-01-01T00:00:00Z' }));
    s = m.get('pool-uid');
    assert.deepEqual([s.members.size, s.ready.size], [0, 0]);
    assert.ok(m.satisfied('pool-uid'));
  });
});
