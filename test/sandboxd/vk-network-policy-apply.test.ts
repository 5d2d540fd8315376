/**
 * The virtual kubelet enforces the NetworkPolicies that select a microVM pod on its VM (CRD layout): against the real
 * control plane, with the simulated engine (src/vmm/sim-driver.ts records the policy a VM is told to enforce), a
 * net=egress Pod bound to the sandboxd virtual node gets the template layer of the policy that selects it; a change
 * of the policy re-applies it to the running pod's VM; its deletion brings the secure default back; a pod no policy
 * selects keeps the secure default. An Ingress policy gives the VM's ingress layer the same way, and a networked VM's
 * pod reports the VM's own address (its namespace's, which the QEMU driver records; here set on the simulated VM's
 * record as that driver would) as its podIP.
 *
 *   node --import tsx test/run.ts test/sandboxd/vk-network-policy-apply.test.ts
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { isDeepStrictEqual } from 'node:util';
import type { VmNetworkPolicy } from '../../src/api/vm-network.js';
import { KubeClient, NetworkPolicies, Pods, type KubeObject } from '../../src/kube/index.js';
import type { NodeEngine } from '../../src/sandboxd/engine.js';
import type { Pod } from '../../src/sandboxd/vk/types.js';
import { createTestNamespace, getTestCluster } from '../support/cluster.js';
import { eventually } from '../support/eventually.js';
import { simNodeEngine } from '../support/sim-node.js';
import { startTestVirtualNode, type TestVirtualNode } from '../support/virtual-node.js';

function egressPod(ns: string, name: string, node: string, labels: Record<string, string>): Pod {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name,
      namespace: ns,
      labels,
      annotations: { 'sandbox.cocoonstack.io/net': 'egress', 'sandbox.cocoonstack.io/ttl-seconds': '600' },
    },
    spec: {
      nodeName: node,
      containers: [{ name: 'main', image: 'sandbox/minimal' }],
      tolerations: [{ key: 'virtual-kubelet.io/provider', operator: 'Exists', effect: 'NoSchedule' }],
    },
  };
}

function policy(ns: string, cidr: string): KubeObject & { spec: unknown } {
  return {
    apiVersion: 'networking.k8s.io/v1',
    kind: 'NetworkPolicy',
    metadata: { name: 'agents-out', namespace: ns },
    spec: {
      podSelector: { matchExpressions: [{ key: 'app', operator: 'In', values: ['agent'] }] },
      policyTypes: ['Egress'],
      egress: [{ to: [{ ipBlock: { cidr } }], ports: [{ protocol: 'TCP', port: 8080 }] }],
    },
  };
}

describe(
  'virtual kubelet: NetworkPolicies on the VMs of the pods they select (sim engine)',
  { timeout: 120_000 },
  () => {
    let ns: Awaited<ReturnType<typeof createTestNamespace>>;
    let client: KubeClient;
    let node: TestVirtualNode | undefined;
    let engine: NodeEngine;
    let sbxNode: string;
    let hostAddress: string;

    before(async () => {
      const cluster = await getTestCluster();
      hostAddress = cluster.hostAddress;
      ns = await createTestNamespace('vknp');
      client = await KubeClient.fromKubeconfig(cluster.kubeconfigPath, { qps: -1 });
      node = await startTestVirtualNode({
        cluster,
        client,
        base: `vknp-${process.pid}`,
        podResyncMs: 60_000, // a re-apply must come from the policy's watch event, not from a pod resync
        engine: (dir) => simNodeEngine(dir, { nodeName: `vknp-${process.pid}`, primeWarmVms: false }).engine,
      });
      engine = node.engine;
      sbxNode = node.vk.nodes.find((n) => n.kind === 'sandboxd')!.name;
    });

    after(async () => {
      await node?.stop();
      await ns?.cleanup();
    });

    /** What the pod's VM enforces now (the sim VM's record), once the pod has a VM. */
    const enforced = (pod: string): VmNetworkPolicy | undefined | 'no VM' => {
      const rec = engine.byRef(`${ns.name}/${pod}`);
      return rec ? engine.vm(rec.id).record.netPolicy : 'no VM';
    };
    const layerOf = (cidr: string) => ({
      template: {
        source: `NetworkPolicy ${ns.name}/agents-out`,
        rules: [{ action: 'allow', to: [cidr], ports: [{ protocol: 'tcp', port: 8080 }] }],
        otherwise: 'deny',
      },
    });

    it('applies the selecting policy at the claim, re-applies its change, and drops it with the policy', async () => {
      await client.create(NetworkPolicies, policy(ns.name, '10.1.0.0/16'));
      await client.create(Pods, egressPod(ns.name, 'agent', sbxNode, { app: 'agent' }));
      await client.create(Pods, egressPod(ns.name, 'other', sbxNode, { app: 'web' }));
      await eventually(() => enforced('agent'), {
        until: (p) => isDeepStrictEqual(p, layerOf('10.1.0.0/16')),
        timeoutMs: 30_000,
        what: 'the selected pod VM enforcing the policy',
      });
      await eventually(() => enforced('other'), { until: (p) => p === undefined, timeoutMs: 30_000 });
      assert.deepEqual(engine.byRef(`${ns.name}/agent`)?.network, layerOf('10.1.0.0/16'), 'recorded with the claim');

      await client.patch(
        NetworkPolicies,
        ns.name,
        'agents-out',
        {
          spec: { egress: [{ to: [{ ipBlock: { cidr: '10.2.0.0/16' } }], ports: [{ protocol: 'TCP', port: 8080 }] }] },
        },
        'merge',
      );
      await eventually(() => enforced('agent'), {
        until: (p) => isDeepStrictEqual(p, layerOf('10.2.0.0/16')),
        timeoutMs: 10_000,
        what: 'the changed policy re-applied to the running VM',
      });

      await client.delete(NetworkPolicies, ns.name, 'agents-out');
      await eventually(() => enforced('agent'), {
        until: (p) => p === undefined,
        timeoutMs: 10_000,
        what: 'the secure default back once the policy is gone',
      });
      assert.equal(enforced('other'), undefined, 'a pod the policy never selected was left alone');
    });

    it("reports the VM's address as the pod's IP, and enforces the Ingress policy selecting the pod", async () => {
      await client.create(Pods, egressPod(ns.name, 'served', sbxNode, { app: 'server' }));
      const rec = await eventually(() => engine.byRef(`${ns.name}/served`), {
        until: (r) => r !== undefined,
        timeoutMs: 30_000,
        what: 'the pod bound to a VM',
      });
      // What the QEMU driver records for a networked VM (src/vmm/types.ts VmNetns); the sim driver has no namespaces.
      engine.vm(rec!.id).record.netns = {
        name: 'sbx-test',
        hostIf: 'sbxv0test',
        hostAddress: '10.200.0.5',
        nsAddress: '10.200.0.6',
      };
      await client.create(NetworkPolicies, {
        apiVersion: 'networking.k8s.io/v1',
        kind: 'NetworkPolicy',
        metadata: { name: 'served-in', namespace: ns.name },
        spec: {
          podSelector: { matchLabels: { app: 'server' } },
          policyTypes: ['Ingress'],
          ingress: [{ from: [{ ipBlock: { cidr: '10.8.0.0/16' } }], ports: [{ protocol: 'TCP', port: 8080 }] }],
        },
      });
      const ingress = {
        source: `NetworkPolicy ${ns.name}/served-in`,
        rules: [{ action: 'allow', to: ['10.8.0.0/16'], ports: [{ protocol: 'tcp', port: 8080 }] }],
        otherwise: 'deny',
      };
      await eventually(() => enforced('served'), {
        until: (p) => isDeepStrictEqual(p, { ingress }),
        timeoutMs: 10_000,
        what: 'the ingress layer of the selecting policy on the VM',
      });
      const status = await eventually(async () => (await client.get<Pod>(Pods, ns.name, 'served')).status, {
        until: (s) => s?.podIP === '10.200.0.6',
        timeoutMs: 10_000,
        what: "the VM's address as the pod's IP",
      });
      assert.deepEqual(status?.podIPs, [{ ip: '10.200.0.6' }]);
      assert.equal(status?.hostIP, hostAddress, "the host's address stays the node's");

      await client.delete(NetworkPolicies, ns.name, 'served-in');
      await eventually(() => enforced('served'), {
        until: (p) => p === undefined,
        timeoutMs: 10_000,
        what: 'every peer admitted again once the policy is gone',
      });
    });
  },
);
