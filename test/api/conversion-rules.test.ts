/**
 * The spec §4 mapping rules, case by case (the property tests prove the round trips; these pin the meaning).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  claimV1alpha1Intent,
  ConversionKeys,
  convertObject,
  resolveShadowPoolTemplate,
  stripRandomSuffix,
  type SandboxClaim,
} from '../../src/api/index.js';

const pod = { spec: { containers: [{ name: 'c', image: 'busybox' }] } };
const meta = (annotations?: Record<string, string>) => ({
  name: 'x',
  namespace: 'ns',
  ...(annotations ? { annotations } : {}),
});
const ann = (o: Record<string, unknown>) => (o['metadata'] as { annotations?: Record<string, string> }).annotations;
const spec = (o: Record<string, unknown>) => o['spec'] as Record<string, unknown>;
const SB_A = 'agents.x-k8s.io/v1alpha1';
const SB_B = 'agents.x-k8s.io/v1beta1';
const EXT_A = 'extensions.agents.x-k8s.io/v1alpha1';
const EXT_B = 'extensions.agents.x-k8s.io/v1beta1';

describe('Sandbox conversion rules', () => {
  const alpha = (replicas: number | undefined, status?: object) => ({
    apiVersion: SB_A,
    kind: 'Sandbox',
    metadata: meta(),
    spec: { podTemplate: pod, ...(replicas === undefined ? {} : { replicas }) },
    ...(status ? { status } : {}),
  });
  const table: [string, number | undefined, string][] = [
    ['replicas 0 suspends', 0, 'Suspended'],
    ['replicas 1 runs', 1, 'Running'],
    ['no replicas runs', undefined, 'Running'],
  ];
  for (const [what, replicas, mode] of table) {
    it(what, () => assert.equal(spec(convertObject(alpha(replicas), SB_B))['operatingMode'], mode));
  }
  it('operatingMode maps back to replicas; nodeName is not in v1alpha1', () => {
    const hub = {
      apiVersion: SB_B,
      kind: 'Sandbox',
      metadata: meta(),
      spec: { podTemplate: pod, operatingMode: 'Suspended' },
      status: { nodeName: 'n1', podIPs: ['10.0.0.1'] },
    };
    const view = convertObject(hub, SB_A);
    assert.equal(spec(view)['replicas'], 0);
    assert.deepEqual(view['status'], { replicas: 0, podIPs: ['10.0.0.1'] });
    assert.deepEqual(convertObject(view, SB_B), hub, 'nodeName survives the round trip');
  });
  it('writes the state annotation only when v1alpha1 says more than operatingMode', () => {
    assert.equal(ann(convertObject(alpha(1, { replicas: 1 }), SB_B)), undefined);
    const hub = convertObject(alpha(1, { replicas: 7 }), SB_B);
    assert.equal(ann(hub)?.[ConversionKeys.sandboxV1alpha1State], '{"spec":{"replicas":1},"status":{"replicas":7}}');
  });
  it('reads legacy state annotations holding a whole v1alpha1 object', () => {
    const legacy = JSON.stringify({
      apiVersion: SB_A,
      kind: 'Sandbox',
      spec: { replicas: 1, podTemplate: pod },
      status: { replicas: 3 },
    });
    const hub = {
      apiVersion: SB_B,
      kind: 'Sandbox',
      metadata: meta({ [ConversionKeys.sandboxV1alpha1State]: legacy }),
      spec: { podTemplate: pod, operatingMode: 'Running' },
      status: {},
    };
    const view = convertObject(hub, SB_A);
    assert.equal(spec(view)['replicas'], 1);
    assert.deepEqual(view['status'], { replicas: 3 });
    assert.equal(ann(view)?.[ConversionKeys.sandboxV1alpha1State], undefined);
  });
  it('a hub suspended after a v1alpha1 write shows replicas 0', () => {
    const hub = {
      apiVersion: SB_B,
      kind: 'Sandbox',
      metadata: meta({ [ConversionKeys.sandboxV1alpha1State]: '{"spec":{"replicas":1},"status":{}}' }),
      spec: { podTemplate: pod, operatingMode: 'Suspended' },
    };
    assert.equal(spec(convertObject(hub, SB_A))['replicas'], 0);
  });
});

describe('SandboxTemplate conversion rules', () => {
  it('volumeClaimTemplatesPolicy travels in an annotation of the v1alpha1 view', () => {
    const hub = {
      apiVersion: EXT_B,
      kind: 'SandboxTemplate',
      metadata: meta(),
      spec: { podTemplate: pod, volumeClaimTemplatesPolicy: 'Overrides' },
    };
    const view = convertObject(hub, EXT_A);
    assert.deepEqual(ann(view), { [ConversionKeys.volumeClaimTemplatesPolicy]: 'Overrides' });
    assert.equal(spec(view)['volumeClaimTemplatesPolicy'], undefined);
    const back = convertObject(view, EXT_B);
    assert.deepEqual(back, hub);
  });
});

describe('SandboxWarmPool conversion rules', () => {
  it('v1beta1 without replicas shows 1 in v1alpha1', () => {
    const hub = {
      apiVersion: EXT_B,
      kind: 'SandboxWarmPool',
      metadata: meta(),
      spec: { sandboxTemplateRef: { name: 't' } },
    };
    assert.equal(spec(convertObject(hub, EXT_A))['replicas'], 1);
  });
});

describe('SandboxClaim conversion rules', () => {
  const alpha = (warmpool: string | undefined, sandboxName?: string, annotations?: Record<string, string>) => ({
    apiVersion: EXT_A,
    kind: 'SandboxClaim',
    metadata: meta(annotations),
    spec: { sandboxTemplateRef: { name: 'tpl' }, ...(warmpool === undefined ? {} : { warmpool }) },
    ...(sandboxName ? { status: { sandbox: { name: sandboxName } } } : {}),
  });
  const pool = (o: Record<string, unknown>) => (spec(o)['warmPoolRef'] as { name: string }).name;
  const table: [string, ReturnType<typeof alpha>, string][] = [
    ['a specific pool is the warmPoolRef', alpha('fast'), 'fast'],
    ['none goes to the shadow pool', alpha('none'), 'shadow-pool-tpl'],
    ['default goes to the shadow pool', alpha('default'), 'shadow-pool-tpl'],
    ['a warm-started default claim goes to its sandbox pool', alpha('default', 'fast-x7k2q'), 'fast'],
    ['a cold-started claim (sandbox named like it) goes to the shadow pool', alpha('default', 'x'), 'shadow-pool-tpl'],
  ];
  for (const [what, obj, expected] of table) it(what, () => assert.equal(pool(convertObject(obj, EXT_B)), expected));

  it('the template name survives v1alpha1 -> v1beta1 -> v1alpha1 for a specific pool', () => {
    const hub = convertObject(alpha('fast'), EXT_B);
    assert.deepEqual(claimV1alpha1Intent(hub as SandboxClaim), { templateName: 'tpl', warmpool: 'fast' });
    assert.deepEqual(convertObject(hub, EXT_A), alpha('fast'));
  });
  it('a hub claim without state shows the template the claim controller recorded', () => {
    const hub = {
      apiVersion: EXT_B,
      kind: 'SandboxClaim',
      metadata: meta({ 'agents.x-k8s.io/sandbox-template-ref': 'python' }),
      spec: { warmPoolRef: { name: 'fast' } },
    };
    const view = convertObject(hub, EXT_A);
    assert.deepEqual(spec(view), { sandboxTemplateRef: { name: 'python' }, warmpool: 'fast' });
    assert.deepEqual(convertObject(view, EXT_B), hub);
  });
  it('a hub claim on a shadow pool shows its template and warmpool default', () => {
    const hub = {
      apiVersion: EXT_B,
      kind: 'SandboxClaim',
      metadata: meta(),
      spec: { warmPoolRef: { name: 'shadow-pool-py' } },
    };
    assert.deepEqual(spec(convertObject(hub, EXT_A)), { sandboxTemplateRef: { name: 'py' }, warmpool: 'default' });
  });
  it('a warmPoolRef changed through v1beta1 wins over a stale stashed warmpool', () => {
    const hub = convertObject(alpha('fast'), EXT_B);
    (spec(hub)['warmPoolRef'] as { name: string }).name = 'slow';
    assert.deepEqual(spec(convertObject(hub, EXT_A)), { sandboxTemplateRef: { name: 'tpl' }, warmpool: 'slow' });
  });
  it('claim volumeClaimTemplates survive a v1alpha1 round trip', () => {
    const vcts = [{ metadata: { name: 'data' }, spec: { resources: { requests: { storage: '1Gi' } } } }];
    const hub = {
      apiVersion: EXT_B,
      kind: 'SandboxClaim',
      metadata: meta(),
      spec: { warmPoolRef: { name: 'p' }, volumeClaimTemplates: vcts },
    };
    const view = convertObject(hub, EXT_A);
    assert.equal(ann(view)?.[ConversionKeys.sandboxClaimVolumeClaimTemplates], JSON.stringify(vcts));
    assert.deepEqual(convertObject(view, EXT_B), hub);
  });
  it('helpers', () => {
    assert.equal(resolveShadowPoolTemplate('shadow-pool-py'), 'py');
    assert.equal(resolveShadowPoolTemplate('shadow-pool-'), undefined);
    assert.equal(resolveShadowPoolTemplate('fast'), undefined);
    assert.equal(stripRandomSuffix('pool-a-x7k2q'), 'pool-a');
    assert.equal(stripRandomSuffix('pool'), 'pool');
  });
});
