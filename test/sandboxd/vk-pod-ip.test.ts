/**
 * A networked vk-cocoon Pod is reachable at its own address (docs/vm.md "Networking"): the virtual kubelet
 * reports the VM's namespace address as `status.podIP`, a headless Service's EndpointSlice points at it, and a
 * client outside the VM (this test process, in the host's network namespace, as sandboxd's in-cluster SDK modes
 * `in-cluster-pod-ip` and `in-cluster-service` would be) reaches a guest server there: a real QEMU microVM on the
 * egress lane.
 */
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { KubeClient, Pods, Services, type ResourceType } from '../../src/kube/index.js';
import type { Pod } from '../../src/sandboxd/vk/types.js';
import { createTestNamespace, getTestCluster, type TestCluster } from '../support/cluster.js';
import { eventually } from '../support/eventually.js';
import { startTestVirtualNode, type TestVirtualNode } from '../support/virtual-node.js';
import { BUILD_TIMEOUT_MS } from '../vm/helpers.js';

const EGRESS = { template: 'sandbox/minimal', net: 'egress', size: 'small' } as const;
const PORT = 8080;
const EndpointSlices: ResourceType = {
  group: 'discovery.k8s.io',
  version: 'v1',
  kind: 'EndpointSlice',
  plural: 'endpointslices',
  namespaced: true,
};
interface EndpointSlice {
  metadata: { name?: string };
  endpoints?: Array<{ addresses: string[]; conditions?: { ready?: boolean } }>;
  ports?: Array<{ port?: number }>;
}

/** What a guest server says to one TCP connection at host:port (it greets and closes). */
const greeting = (host: string, port: number) =>
  new Promise<string>((resolve, reject) => {
    const s = connect(port, host);
    let data = '';
    s.setTimeout(5000, () => s.destroy(new Error(`no answer from ${host}:${port} in 5 s`)));
    s.on('data', (b: Buffer) => (data += b.toString()));
    s.on('end', () => resolve(data));
    s.on('error', reject);
  });

describe(
  'a networked VM Pod at its own podIP, and behind a headless Service',
  { timeout: BUILD_TIMEOUT_MS + 5 * 60_000 },
  () => {
    let cluster: TestCluster;
    let ns: Awaited<ReturnType<typeof createTestNamespace>>;
    let client: KubeClient;
    let node: TestVirtualNode | undefined;

    before(
      async () => {
        cluster = await getTestCluster();
        ns = await createTestNamespace('vkip');
        client = await KubeClient.fromKubeconfig(cluster.kubeconfigPath, { qps: -1 });
        node = await startTestVirtualNode({ cluster, client, base: `vkip-${process.pid}`, podResyncMs: 2000 });
        await node.engine.prepare(EGRESS);
      },
      { timeout: BUILD_TIMEOUT_MS + 2 * 60_000 },
    );

    after(async () => {
      await node?.stop();
      client?.close();
      await ns?.cleanup();
    });

    it('podIP is the VM address, and a guest server answers there and at the EndpointSlice of its headless Service', async () => {
      const vkNode = node!.vk.nodes.find((n) => n.kind === 'vk-cocoon')!.name;
      await client.create(Pods, {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: {
          name: 'ip',
          namespace: ns.name,
          labels: { app: 'vk-pod-ip' },
          annotations: { 'sandbox.cocoonstack.io/net': 'egress' },
        },
        spec: {
          nodeName: vkNode,
          containers: [{ name: 'main', image: 'sandbox/minimal:latest', ports: [{ containerPort: PORT }] }],
          tolerations: [{ key: 'virtual-kubelet.io/provider', operator: 'Exists', effect: 'NoSchedule' }],
        },
      } satisfies Pod);
      await client.create(Services, {
        apiVersion: 'v1',
        kind: 'Service',
        metadata: { name: 'ip', namespace: ns.name },
        spec: { clusterIP: 'None', selector: { app: 'vk-pod-ip' }, ports: [{ name: 'tcp', port: PORT }] },
      });
      const pod = await eventually(() => client.get<Pod>(Pods, ns.name, 'ip'), {
        timeoutMs: 120_000,
        until: (p) => p.status?.conditions?.find((c) => c.type === 'Ready')?.status === 'True',
        what: 'pod ip Ready',
      });
      const engine = node!.engine;
      const vm = engine.vm(engine.byRef(`${ns.name}/ip`)!.id);
      const address = vm.record.netns?.nsAddress;
      assert.ok(address, 'the VM has a network namespace address');
      assert.equal(pod.status?.podIP, address);
      assert.deepEqual(pod.status?.podIPs, [{ ip: address }]);
      assert.notEqual(address, cluster.hostAddress);

      await vm.run([
        'sh',
        '-c',
        `printf '#!/bin/sh\\necho hello-from-%s\\n' "$(hostname)" > /tmp/hi; chmod +x /tmp/hi`,
      ]);
      vm.exec(['nc', '-ll', '-p', String(PORT), '-e', '/tmp/hi'], { collect: false });
      const direct = await eventually(() => greeting(address, PORT).catch((e: Error) => `ERR ${e.message}`), {
        timeoutMs: 60_000,
        until: (g) => g.startsWith('hello-from-'),
        what: `the guest server at ${address}:${PORT}`,
      });

      const slice = await eventually(
        () =>
          client
            .list<EndpointSlice>(EndpointSlices, ns.name, { labelSelector: 'kubernetes.io/service-name=ip' })
            .then((l) => l.items[0]),
        {
          timeoutMs: 60_000,
          until: (s) => !!s?.endpoints?.some((e) => e.addresses.includes(address) && e.conditions?.ready === true),
          what: "the Service's EndpointSlice naming the pod address, ready",
        },
      );
      const endpoint = slice!.endpoints!.find((e) => e.addresses.includes(address))!;
      assert.equal(slice!.ports?.[0]?.port, PORT);
      assert.equal(await greeting(endpoint.addresses[0]!, slice!.ports![0]!.port!), direct);
    });
  },
);
