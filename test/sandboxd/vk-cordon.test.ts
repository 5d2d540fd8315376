/**
 * A cordon of a virtual Node drains its sandboxd (docs/sandboxd.md "Draining"), against the real control plane with
 * the simulated engine: `spec.unschedulable: true` on the sandboxd Node (what `kubectl cordon` and the first step of
 * `kubectl drain` write) hibernates the pod's VM (the Pod turns un-Ready, its claim is kept) and makes the engine
 * refuse claims with `sandboxd.draining`; the uncordon takes claims again and wakes the VM (the Pod is Ready again).
 *
 *   node --import tsx test/run.ts test/sandboxd/vk-cordon.test.ts
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { KubeClient, Nodes, Pods } from '../../src/kube/index.js';
import { SandboxError } from '../../src/errors.js';
import { NodeDrain } from '../../src/sandboxd/drain.js';
import type { NodeEngine } from '../../src/sandboxd/engine.js';
import type { Pod } from '../../src/sandboxd/vk/types.js';
import { silentLogger } from '../../src/log/logger.js';
import { createTestNamespace, getTestCluster } from '../support/cluster.js';
import { eventually } from '../support/eventually.js';
import { simNodeEngine } from '../support/sim-node.js';
import { MINIMAL_KEY, startTestVirtualNode, type TestVirtualNode } from '../support/virtual-node.js';

describe('virtual kubelet: a cordoned Node drains sandboxd (sim engine)', { timeout: 120_000 }, () => {
  let ns: Awaited<ReturnType<typeof createTestNamespace>>;
  let client: KubeClient;
  let node: TestVirtualNode | undefined;
  let engine: NodeEngine;
  let drain: NodeDrain;
  let sbxNode: string;

  before(async () => {
    const cluster = await getTestCluster();
    ns = await createTestNamespace('vkcordon');
    client = await KubeClient.fromKubeconfig(cluster.kubeconfigPath, { qps: -1 });
    const name = `vkcordon-${process.pid}`;
    node = await startTestVirtualNode({
      cluster,
      client,
      base: name,
      podResyncMs: 60_000, // readiness must follow the hibernate and the wake, not a resync
      engine: (dir) => {
        const e = simNodeEngine(dir, { nodeName: name }).engine;
        drain = new NodeDrain({ engine: e, dataDir: dir, logger: silentLogger });
        return e;
      },
      onCordon: (n, cordoned) => {
        if (cordoned) drain.start(`node/${n}`);
        else drain.stop(`node/${n}`);
      },
    });
    engine = node.engine;
    sbxNode = node.vk.nodes.find((n) => n.kind === 'sandboxd')!.name;
  });

  after(async () => {
    if (sbxNode)
      await client.patch(Nodes, undefined, sbxNode, { spec: { unschedulable: null } }, 'merge').catch(() => {});
    await drain?.close();
    await node?.stop();
    await ns?.cleanup();
  });

  const ready = async (name: string) => {
    const pod = await client.get<Pod>(Pods, ns.name, name);
    return pod.status?.conditions?.find((c) => c.type === 'Ready')?.status;
  };

  it('cordon: the pod VM is hibernated and claims are refused; uncordon: claims work and the VM runs again', async () => {
    await client.create<Pod>(Pods, {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'agent', namespace: ns.name, annotations: { 'sandbox.cocoonstack.io/ttl-seconds': '600' } },
      spec: {
        nodeName: sbxNode,
        containers: [{ name: 'main', image: 'sandbox/minimal' }],
        tolerations: [{ key: 'virtual-kubelet.io/provider', operator: 'Exists', effect: 'NoSchedule' }],
      },
    });
    await eventually(() => ready('agent'), { until: (s) => s === 'True', timeoutMs: 30_000, what: 'the pod Ready' });
    const claim = engine.byRef(`${ns.name}/agent`)!;

    await client.patch(Nodes, undefined, sbxNode, { spec: { unschedulable: true } }, 'merge');
    await eventually(() => engine.get(claim.id), {
      until: (r) => r?.hibernated === true,
      timeoutMs: 20_000,
      what: "the cordon's drain hibernating the pod's VM",
    });
    assert.deepEqual(drain.status().reasons, [`node/${sbxNode}`]);
    await eventually(() => ready('agent'), {
      until: (s) => s === 'False',
      timeoutMs: 20_000,
      what: 'the pod un-Ready',
    });
    await assert.rejects(
      engine.claim({ key: MINIMAL_KEY, ttlSeconds: 60 }),
      (err: unknown) => err instanceof SandboxError && err.code === 'sandboxd.draining',
    );

    await client.patch(Nodes, undefined, sbxNode, { spec: { unschedulable: null } }, 'merge');
    await eventually(() => drain.active, { until: (a) => !a, timeoutMs: 20_000, what: 'the uncordon undraining' });
    await eventually(() => engine.get(claim.id), {
      until: (r) => r?.hibernated === false,
      timeoutMs: 20_000,
      what: "the undrain waking the pod's VM",
    });
    await eventually(() => ready('agent'), {
      until: (s) => s === 'True',
      timeoutMs: 20_000,
      what: 'the pod Ready again',
    });
    const fresh = await engine.claim({ key: MINIMAL_KEY, ttlSeconds: 60 });
    await engine.release(fresh.id);
  });
});
