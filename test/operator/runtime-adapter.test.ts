import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { PodSpec } from '../../src/api/index.js';
import {
  adaptPodForRuntime,
  selectRuntime,
  stableVmName,
  type AdaptablePod,
  type RuntimeName,
} from '../../src/operator/runtime/adapter.js';

const RT = 'sandbox.cocoonstack.io/runtime';
const pod = (annotations: Record<string, string> = {}, spec: Partial<PodSpec> = {}): AdaptablePod => ({
  metadata: { annotations },
  spec: { containers: [{ name: 'main', image: 'ghcr.io/acme/agent:1' }], ...spec },
});
const adapt = (p: AdaptablePod, defaultRuntime: RuntimeName = 'standard') =>
  adaptPodForRuntime(p, { sandboxNamespace: 'agents', sandboxName: 'worker', defaultRuntime });

describe('runtime adapter: stable VM name', () => {
  const cases: Array<[string, string, string, RegExp | string]> = [
    ['spec vector', 'agents', 'worker', 'sandbox-agents-worker-678b0d72'],
    ['runs of odd characters collapse to one dash', 'Team_A', 'My..Box', /^sandbox-team-a-my-box-[0-9a-f]{8}$/],
    [
      'long names are cut to 54 chars before the hash',
      'n'.repeat(40),
      'x'.repeat(40),
      /^sandbox-n{40}-x{5}-[0-9a-f]{8}$/,
    ],
    ['a trailing dash left by the cut is trimmed', 'a'.repeat(45), 'b', /^sandbox-a{45}-[0-9a-f]{8}$/],
  ];
  for (const [name, ns, sb, want] of cases)
    it(name, () => {
      const got = stableVmName(ns, sb);
      if (typeof want === 'string') assert.equal(got, want);
      else assert.match(got, want);
      assert.ok(got.length <= 63, `${got} is ${got.length} chars`);
    });
});

describe('runtime adapter: selection', () => {
  const cases: Array<[string, AdaptablePod, RuntimeName, { runtime: RuntimeName; explicit: boolean } | string]> = [
    ['annotation wins (trimmed)', pod({ [RT]: ' vk-cocoon ' }), 'standard', { runtime: 'vk-cocoon', explicit: true }],
    [
      'runtimeClassName implies standard',
      pod({}, { runtimeClassName: 'kata' }),
      'vk-cocoon',
      { runtime: 'standard', explicit: false },
    ],
    ['operator default otherwise', pod(), 'sandboxd', { runtime: 'sandboxd', explicit: false }],
    ['blank annotation falls through', pod({ [RT]: '  ' }), 'standard', { runtime: 'standard', explicit: false }],
    [
      'unknown value is rejected',
      pod({ [RT]: 'firecracker' }),
      'standard',
      'unsupported sandbox.cocoonstack.io/runtime value "firecracker"',
    ],
  ];
  for (const [name, p, def, want] of cases)
    it(name, () => {
      if (typeof want === 'string') assert.throws(() => selectRuntime(p, def), { message: want });
      else assert.deepEqual(selectRuntime(p, def), want);
    });
});

describe('runtime adapter: mutation', () => {
  it('standard leaves the pod untouched', () => {
    const p = pod();
    assert.equal(adapt(p), p);
  });

  it('vk-cocoon fills node selector, toleration and boot annotations', () => {
    const out = adapt(pod({ [RT]: 'vk-cocoon' }, { os: { name: 'Linux' } }));
    assert.deepEqual(out.spec.nodeSelector, { 'node.kubernetes.io/instance-type': 'virtual-node' });
    assert.deepEqual(out.spec.tolerations, [
      { key: 'virtual-kubelet.io/provider', operator: 'Exists', effect: 'NoSchedule' },
    ]);
    assert.deepEqual(out.metadata.annotations, {
      [RT]: 'vk-cocoon',
      'cocoonset.cocoonstack.io/mode': 'run',
      'cocoonset.cocoonstack.io/managed': 'true',
      'vm.cocoonstack.io/name': 'sandbox-agents-worker-678b0d72',
      'cocoonset.cocoonstack.io/image': 'ghcr.io/acme/agent:1',
      'cocoonset.cocoonstack.io/os': 'linux',
    });
  });

  it('sandboxd fills its selector and template annotation (from the operator default)', () => {
    const out = adapt(pod(), 'sandboxd');
    assert.deepEqual(out.spec.nodeSelector, { [RT]: 'sandboxd' });
    assert.deepEqual(out.metadata.annotations, {
      [RT]: 'sandboxd',
      'sandbox.cocoonstack.io/template': 'ghcr.io/acme/agent:1',
    });
  });

  it('never overwrites user values, keeps an equivalent toleration, and is idempotent', () => {
    const p = pod(
      { [RT]: 'vk-cocoon', 'vm.cocoonstack.io/name': 'mine', 'cocoonset.cocoonstack.io/os': 'windows' },
      {
        nodeSelector: { 'node.kubernetes.io/instance-type': 'virtual-node', zone: 'a' },
        tolerations: [{ key: 'virtual-kubelet.io/provider', operator: 'Exists' }],
      },
    );
    const once = adapt(p);
    assert.equal(once.metadata.annotations?.['vm.cocoonstack.io/name'], 'mine');
    assert.equal(once.metadata.annotations?.['cocoonset.cocoonstack.io/os'], 'windows');
    assert.deepEqual(once.spec.nodeSelector, { 'node.kubernetes.io/instance-type': 'virtual-node', zone: 'a' });
    assert.equal(once.spec.tolerations?.length, 1);
    assert.deepEqual(adapt(once), once);
    assert.deepEqual(
      p.spec.tolerations,
      [{ key: 'virtual-kubelet.io/provider', operator: 'Exists' }],
      'input not modified',
    );
  });

  it('a default virtual runtime yields to runtimeClassName (standard), an explicit one conflicts', () => {
    const implicit = pod({}, { runtimeClassName: 'kata' });
    assert.equal(adapt(implicit, 'vk-cocoon'), implicit);
  });

  const conflicts: Array<[string, AdaptablePod, RuntimeName, string]> = [
    [
      'explicit vk-cocoon + runtimeClassName',
      pod({ [RT]: 'vk-cocoon' }, { runtimeClassName: 'kata' }),
      'standard',
      'sandbox.cocoonstack.io/runtime=vk-cocoon conflicts with spec.runtimeClassName',
    ],
    [
      'explicit sandboxd + runtimeClassName',
      pod({ [RT]: 'sandboxd' }, { runtimeClassName: 'kata' }),
      'standard',
      'sandbox.cocoonstack.io/runtime=sandboxd conflicts with spec.runtimeClassName',
    ],
    [
      'vk-cocoon + nodeName',
      pod({ [RT]: 'vk-cocoon' }, { nodeName: 'n1' }),
      'standard',
      'sandbox.cocoonstack.io/runtime=vk-cocoon conflicts with spec.nodeName=n1',
    ],
    [
      'default sandboxd + nodeName',
      pod({}, { nodeName: 'n1' }),
      'sandboxd',
      'sandbox.cocoonstack.io/runtime=sandboxd conflicts with spec.nodeName=n1',
    ],
    [
      'vk-cocoon + other instance-type',
      pod({ [RT]: 'vk-cocoon' }, { nodeSelector: { 'node.kubernetes.io/instance-type': 'm5.large' } }),
      'standard',
      'node selector node.kubernetes.io/instance-type=m5.large conflicts with vk-cocoon value virtual-node',
    ],
    [
      'sandboxd + other runtime selector',
      pod({ [RT]: 'sandboxd' }, { nodeSelector: { [RT]: 'gvisor' } }),
      'standard',
      'node selector sandbox.cocoonstack.io/runtime=gvisor conflicts with sandboxd value sandboxd',
    ],
  ];
  for (const [name, p, def, message] of conflicts)
    it(`rejects, never overwrites: ${name}`, () => {
      const before = structuredClone(p);
      assert.throws(() => adapt(p, def), { name: 'RuntimeAdapterError', message });
      assert.deepEqual(p, before);
    });
});
