import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import { createTestNamespace, getTestCluster, type TestCluster } from '../support/cluster.js';
import { eventually } from '../support/eventually.js';

describe('local control plane (real etcd + kube-apiserver + controller-manager + scheduler; kwok-simulated nodes)', () => {
  let cluster: TestCluster;
  let ns: Awaited<ReturnType<typeof createTestNamespace>>;

  before(async () => {
    cluster = await getTestCluster();
    ns = await createTestNamespace('smoke');
  });
  after(async () => ns?.cleanup());

  it('is Ready in under 10 s from a warm cache', () => {
    process.stderr.write(`control plane /readyz after ${cluster.readyMs} ms\n`);
    assert.ok(cluster.readyMs < 10_000, `control plane took ${cluster.readyMs} ms`);
  });

  it('a client-node watch sees a ConfigMap that kubectl creates and changes', async () => {
    const kc = new k8s.KubeConfig();
    kc.loadFromFile(cluster.kubeconfigPath);
    const seen: Array<{ type: string; value: string | undefined }> = [];
    const watch = new k8s.Watch(kc);
    const req = await watch.watch(
      `/api/v1/namespaces/${ns.name}/configmaps`,
      { fieldSelector: 'metadata.name=greeting' },
      (type: string, obj: k8s.V1ConfigMap) => seen.push({ type, value: obj.data?.hello }),
      () => {},
    );
    try {
      await cluster.kubectl(['-n', ns.name, 'create', 'configmap', 'greeting', '--from-literal=hello=world']);
      await cluster.kubectl([
        '-n',
        ns.name,
        'patch',
        'configmap',
        'greeting',
        '--type=merge',
        '-p',
        '{"data":{"hello":"again"}}',
      ]);
      await eventually(() => seen, {
        until: (s) => s.some((e) => e.type === 'MODIFIED' && e.value === 'again'),
        what: 'the MODIFIED event',
      });
      assert.deepEqual(seen[0], { type: 'ADDED', value: 'world' });
    } finally {
      req.abort();
    }
  });

  it('a CRD applied with kubectl becomes Established', async () => {
    const crd = {
      apiVersion: 'apiextensions.k8s.io/v1',
      kind: 'CustomResourceDefinition',
      metadata: { name: 'widgets.smoke.sbx.test' },
      spec: {
        group: 'smoke.sbx.test',
        names: { kind: 'Widget', plural: 'widgets', singular: 'widget', listKind: 'WidgetList' },
        scope: 'Namespaced',
        versions: [
          {
            name: 'v1',
            served: true,
            storage: true,
            schema: { openAPIV3Schema: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true } },
          },
        ],
      },
    };
    await cluster.kubectl(['apply', '-f', '-'], JSON.stringify(crd));
    try {
      await cluster.kubectl(['wait', '--for=condition=Established', '--timeout=30s', 'crd/widgets.smoke.sbx.test']);
      await cluster.kubectl(
        ['-n', ns.name, 'apply', '-f', '-'],
        JSON.stringify({
          apiVersion: 'smoke.sbx.test/v1',
          kind: 'Widget',
          metadata: { name: 'w1' },
          spec: { size: 3 },
        }),
      );
      const got = JSON.parse(await cluster.kubectl(['-n', ns.name, 'get', 'widget', 'w1', '-o', 'json'])) as {
        spec: { size: number };
      };
      assert.equal(got.spec.size, 3);
    } finally {
      await cluster.kubectl(['delete', 'crd', 'widgets.smoke.sbx.test', '--wait=false']);
    }
  });

  it('a Deployment gets a ReplicaSet and a Pod that is scheduled onto a simulated node and turns Ready; deleting it garbage-collects the Pods', async () => {
    await cluster.kubectl([
      '-n',
      ns.name,
      'create',
      'deployment',
      'web',
      '--image=registry.k8s.io/pause:3.10',
      '--replicas=2',
    ]);
    type PodList = {
      items: Array<{
        metadata: { name: string; ownerReferences?: Array<{ kind: string }> };
        spec: { nodeName?: string };
        status: { podIP?: string; conditions?: Array<{ type: string; status: string }> };
      }>;
    };
    const pods = await eventually(
      async () =>
        JSON.parse(await cluster.kubectl(['-n', ns.name, 'get', 'pods', '-l', 'app=web', '-o', 'json'])) as PodList,
      {
        timeoutMs: 60_000,
        what: '2 Ready pods',
        until: (l) =>
          l.items.length === 2 &&
          l.items.every((p) => p.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True')),
      },
    );
    for (const p of pods.items) {
      assert.ok(cluster.simulatedNodes.includes(p.spec.nodeName ?? ''), `pod bound to ${p.spec.nodeName}`);
      assert.ok(p.status.podIP, 'pod has an IP');
      assert.equal(p.metadata.ownerReferences?.[0]?.kind, 'ReplicaSet');
    }
    await cluster.kubectl(['-n', ns.name, 'delete', 'deployment', 'web', '--wait=false']);
    await eventually(
      async () =>
        JSON.parse(await cluster.kubectl(['-n', ns.name, 'get', 'pods,replicasets', '-o', 'json'])) as {
          items: unknown[];
        },
      {
        timeoutMs: 60_000,
        what: 'the garbage collector to remove the ReplicaSet and Pods',
        until: (l) => l.items.length === 0,
      },
    );
  });
});
