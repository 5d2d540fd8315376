import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { PodSpec } from '../../src/api/index.js';
import {
  buildPod,
  buildPvc,
  buildService,
  podMetadataForCreate,
  podNameOf,
  repairedService,
  serviceRepairPatch,
  selectorOf,
  servicePortsOf,
  syncedPodMetadata,
  type Pod,
  type SandboxObject,
} from '../../src/operator/sandbox/index.js';

const HASH = 'agents.x-k8s.io/sandbox-name-hash';
const sb = (
  over: Partial<SandboxObject['spec']> = {},
  meta: Partial<SandboxObject['metadata']> = {},
): SandboxObject => ({
  metadata: { name: 'my-sandbox', namespace: 'ns', uid: 'u-1', generation: 1, ...meta },
  spec: {
    podTemplate: {
      metadata: {
        labels: { app: 'x', 'agents.x-k8s.io/claim-uid': 'c', 'extensions.agents.x-k8s.io/foo': 'f' },
        annotations: { note: 'n', 'opentelemetry.io/trace-context': '{}', 'agents.x-k8s.io/pod-name': 'p' },
      },
      spec: { containers: [{ name: 'main', image: 'img' }] },
    },
    ...over,
  },
});

describe('sandbox desired state: names and selector', () => {
  it('selector and name hash follow fnv1a32 (spec vector my-sandbox → 374de8f5)', () => {
    assert.equal(selectorOf('my-sandbox'), `${HASH}=374de8f5`);
  });
  it('pod name is the pod-name annotation, else the sandbox name', () => {
    assert.equal(podNameOf(sb()), 'my-sandbox');
    assert.equal(podNameOf(sb({}, { annotations: { 'agents.x-k8s.io/pod-name': 'other' } })), 'other');
    assert.equal(podNameOf(sb({}, { annotations: { 'agents.x-k8s.io/pod-name': '' } })), 'my-sandbox');
  });
});

describe('sandbox desired state: pod metadata (reserved prefixes never propagate)', () => {
  const cases: Array<[string, SandboxObject, Record<string, string>]> = [
    ['plain sandbox', sb(), { app: 'x', [HASH]: '374de8f5' }],
    [
      'warm pool member: template-ref-hash and warm-pool labels copied, created-by normalized',
      sb(
        {},
        {
          labels: {
            'agents.x-k8s.io/sandbox-template-ref-hash': 't',
            'agents.x-k8s.io/warm-pool-sandbox': 'w',
            'agents.x-k8s.io/created-by': 'controller',
          },
          ownerReferences: [
            {
              apiVersion: 'extensions.agents.x-k8s.io/v1beta1',
              kind: 'SandboxWarmPool',
              name: 'pool',
              uid: 'p',
              controller: true,
            },
          ],
        },
      ),
      {
        app: 'x',
        [HASH]: '374de8f5',
        'agents.x-k8s.io/sandbox-template-ref-hash': 't',
        'agents.x-k8s.io/warm-pool-sandbox': 'w',
        'agents.x-k8s.io/created-by': 'controller',
      },
    ],
    [
      'claimed: template-ref-hash only; unknown created-by → unknown',
      sb(
        {},
        {
          labels: {
            'agents.x-k8s.io/sandbox-template-ref-hash': 't',
            'agents.x-k8s.io/warm-pool-sandbox': 'w',
            'agents.x-k8s.io/created-by': 'me',
          },
          ownerReferences: [
            {
              apiVersion: 'extensions.agents.x-k8s.io/v1beta1',
              kind: 'SandboxClaim',
              name: 'c',
              uid: 'c',
              controller: true,
            },
          ],
        },
      ),
      {
        app: 'x',
        [HASH]: '374de8f5',
        'agents.x-k8s.io/sandbox-template-ref-hash': 't',
        'agents.x-k8s.io/created-by': 'unknown',
      },
    ],
    [
      'not controlled by an extensions kind: no template labels',
      sb({}, { labels: { 'agents.x-k8s.io/sandbox-template-ref-hash': 't' } }),
      { app: 'x', [HASH]: '374de8f5' },
    ],
  ];
  for (const [name, s, labels] of cases)
    it(name, () => {
      const m = podMetadataForCreate(s);
      assert.deepEqual(m.labels, labels);
      assert.deepEqual(m.annotations, {
        note: 'n',
        'agents.x-k8s.io/propagated-labels': 'app',
        'agents.x-k8s.io/propagated-annotations': 'note',
      });
    });

  it('no propagated-* annotations on create when nothing propagates', () => {
    const s = sb();
    s.spec.podTemplate.metadata = {};
    assert.deepEqual(podMetadataForCreate(s).annotations, {});
  });

  it('sync: upserts, prunes removed keys, scrubs system keys an older version recorded, keeps foreign keys', () => {
    const pod: Pod = {
      metadata: {
        name: 'my-sandbox',
        labels: {
          app: 'old',
          gone: '1',
          'agents.x-k8s.io/claim-uid': 'c',
          foreign: 'keep',
          [HASH]: 'wrong',
          'agents.x-k8s.io/warm-pool-sandbox': 'w',
        },
        annotations: {
          'agents.x-k8s.io/propagated-labels': 'agents.x-k8s.io/claim-uid,app,gone',
          'agents.x-k8s.io/propagated-annotations': 'note',
          note: 'n',
          kubectl: 'keep',
        },
      },
      spec: { containers: [] },
    };
    const s = sb();
    s.spec.podTemplate.metadata = { labels: { app: 'new' } };
    const m = syncedPodMetadata(pod, s);
    assert.deepEqual(m.labels, { app: 'new', foreign: 'keep', [HASH]: '374de8f5' });
    assert.deepEqual(m.annotations, {
      'agents.x-k8s.io/propagated-labels': 'app',
      'agents.x-k8s.io/propagated-annotations': '',
      kubectl: 'keep',
    });
  });

  it('sync of a freshly created pod changes nothing (no write on the next pass)', () => {
    const s = sb();
    const pod = buildPod(s, 'my-sandbox', 'standard');
    assert.deepEqual(syncedPodMetadata(pod, s), { labels: pod.metadata.labels, annotations: pod.metadata.annotations });
  });
});

describe('sandbox desired state: pod, PVC, service', () => {
  it('pod: controller ref, claim volumes replace same-named template volumes and are appended', () => {
    const s = sb({
      volumeClaimTemplates: [
        {
          metadata: { name: 'data' },
          spec: { accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '1Gi' } } },
        },
        { metadata: { name: 'cache' }, spec: { accessModes: ['ReadWriteOnce'] } },
      ],
    });
    s.spec.podTemplate.spec.volumes = [
      { name: 'data', emptyDir: {} },
      { name: 'tmp', emptyDir: {} },
    ];
    const pod = buildPod(s, 'my-sandbox', 'standard');
    assert.deepEqual(pod.metadata.ownerReferences, [
      {
        apiVersion: 'agents.x-k8s.io/v1beta1',
        kind: 'Sandbox',
        name: 'my-sandbox',
        uid: 'u-1',
        controller: true,
        blockOwnerDeletion: true,
      },
    ]);
    assert.deepEqual(pod.spec.volumes, [
      { name: 'tmp', emptyDir: {} },
      { name: 'data', persistentVolumeClaim: { claimName: 'data-my-sandbox' } },
      { name: 'cache', persistentVolumeClaim: { claimName: 'cache-my-sandbox' } },
    ]);
    assert.equal(s.spec.podTemplate.spec.volumes.length, 2, 'template not modified');
    const pvc = buildPvc(s, s.spec.volumeClaimTemplates![0]!);
    assert.equal(pvc.metadata.name, 'data-my-sandbox');
    assert.equal(pvc.metadata.labels?.[HASH], '374de8f5');
  });

  it('pod: runtime adapter conflict surfaces as an error', () => {
    const s = sb();
    s.spec.podTemplate.metadata = { annotations: { 'sandbox.cocoonstack.io/runtime': 'vk-cocoon' } };
    s.spec.podTemplate.spec.runtimeClassName = 'kata';
    assert.throws(() => buildPod(s, 'my-sandbox', 'standard'), {
      message: 'sandbox.cocoonstack.io/runtime=vk-cocoon conflicts with spec.runtimeClassName',
    });
  });

  const portCases: Array<[string, PodSpec, Array<{ name: string; port: number; protocol: string }>]> = [
    ['no ports', { containers: [{ name: 'a' }] }, []],
    [
      'dedup by (port, protocol), sorted, named by first explicit name',
      {
        containers: [
          { name: 'a', ports: [{ containerPort: 9090 }, { containerPort: 8080, name: 'web' }] },
          {
            name: 'b',
            ports: [
              { containerPort: 8080, name: 'other' },
              { containerPort: 53, protocol: 'UDP' },
              { containerPort: 53 },
            ],
          },
        ],
      },
      [
        { name: 'p-53-tcp', port: 53, protocol: 'TCP' },
        { name: 'p-53-udp', port: 53, protocol: 'UDP' },
        { name: 'web', port: 8080, protocol: 'TCP' },
        { name: 'p-9090-tcp', port: 9090, protocol: 'TCP' },
      ],
    ],
    [
      'restartable init containers count, plain init containers do not; clashes get -2',
      {
        containers: [
          {
            name: 'a',
            ports: [
              { containerPort: 80, name: 'x' },
              { containerPort: 81, name: 'x' },
            ],
          },
        ],
        initContainers: [
          { name: 'side', restartPolicy: 'Always', ports: [{ containerPort: 82 }] },
          { name: 'init', ports: [{ containerPort: 83 }] },
        ],
      },
      [
        { name: 'x', port: 80, protocol: 'TCP' },
        { name: 'x-2', port: 81, protocol: 'TCP' },
        { name: 'p-82-tcp', port: 82, protocol: 'TCP' },
      ],
    ],
  ];
  for (const [name, spec, want] of portCases)
    it(`service ports: ${name}`, () => {
      assert.deepEqual(
        servicePortsOf(spec),
        want.map((p) => ({ ...p, targetPort: p.port })),
      );
    });

  it('service: headless, label + selector = name hash; repair forces them and keeps server defaults', () => {
    const s = sb({ service: true });
    s.spec.podTemplate.spec.containers[0]!.ports = [{ containerPort: 8888, name: 'http' }];
    const svc = buildService(s);
    assert.equal(svc.spec.clusterIP, 'None');
    assert.deepEqual(svc.spec.selector, { [HASH]: '374de8f5' });
    assert.deepEqual(svc.spec.ports, [{ name: 'http', port: 8888, protocol: 'TCP', targetPort: 8888 }]);
    const live = {
      ...svc,
      metadata: { ...svc.metadata, labels: { other: '1' } },
      spec: { ...svc.spec, selector: { a: 'b' } },
    };
    const want = repairedService(live, s);
    assert.deepEqual(want.labels, { other: '1', [HASH]: '374de8f5' });
    assert.deepEqual(want.selector, { [HASH]: '374de8f5' });
    assert.deepEqual(serviceRepairPatch(live, s), {
      metadata: { labels: { [HASH]: '374de8f5' } },
      spec: { selector: { a: null, [HASH]: '374de8f5' } },
    });
  });

  it('service repair: a Service without ports, as the apiserver returns a headless one with none, needs no patch', () => {
    const s = sb({ service: true });
    const { ports: _none, ...spec } = buildService(s).spec;
    assert.deepEqual(buildService(s).spec.ports ?? [], [], 'the pod template has no ports');
    const live = { ...buildService(s), spec };
    assert.equal(serviceRepairPatch(live, s), undefined);
    // Ports it should not have are still removed.
    const extra = { ...live, spec: { ...spec, ports: [{ name: 'x', port: 1, protocol: 'TCP', targetPort: 1 }] } };
    assert.deepEqual(serviceRepairPatch(extra, s), { spec: { ports: [] } });
  });
});
