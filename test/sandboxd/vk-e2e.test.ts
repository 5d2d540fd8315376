/**
 * End to end on the real control plane and real QEMU microVMs, with the operator in-process: a SandboxTemplate
 * routed to `vk-cocoon` (then `sandboxd`), a SandboxWarmPool of 3 -> 3 Ready Sandboxes backed by 3 QEMU
 * processes; a SandboxClaim adopts one; `kubectl exec` into its Pod prints the guest kernel and `kubectl logs`
 * shows the pod's lifecycle, not that output; deleting the claim destroys that VM and the pool refills to 3.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { KubeClient, Pods, SandboxClaims } from '../../src/kube/index.js';
import type { NodeEngine } from '../../src/sandboxd/engine.js';
import type { VirtualNodes } from '../../src/sandboxd/vk/index.js';
import { liveQemuPids } from '../../src/vmm/index.js';
import { getTestCluster, type TestCluster } from '../support/cluster.js';
import { eventually } from '../support/eventually.js';
import { BUILD_TIMEOUT_MS } from '../vm/helpers.js';
import { MINIMAL_KEY, startTestVirtualNode, type TestVirtualNode } from '../support/virtual-node.js';
import {
  claimManifest,
  createAll,
  getSandboxOrUndefined,
  poolManifest,
  setupEnv,
  templateManifest,
  waitClaim,
  waitPoolReady,
  type Env,
} from '../operator/claim-support.js';

describe('e2e: operator + sandboxd virtual nodes + microVMs', { timeout: BUILD_TIMEOUT_MS + 6 * 60_000 }, () => {
  let cluster: TestCluster;
  let engine: NodeEngine;
  let vk: VirtualNodes;
  let node: TestVirtualNode | undefined;
  let client: KubeClient;
  const base = `vke-${process.pid}`;

  before(
    async () => {
      cluster = await getTestCluster();
      client = await KubeClient.fromKubeconfig(cluster.kubeconfigPath, { qps: -1 });
      node = await startTestVirtualNode({ cluster, client, base });
      ({ engine, vk } = node);
    },
    { timeout: BUILD_TIMEOUT_MS },
  );

  after(async () => {
    await node?.stop();
    client?.close();
  });

  /** The template's pod: the runtime annotation routes it; a hostname selector pins it to this test's node. */
  function vmTemplate(ns: string, runtime: 'vk-cocoon' | 'sandboxd', annotations: Record<string, string> = {}) {
    const node = vk.nodes.find((n) => n.kind === runtime)!.name;
    return templateManifest(ns, 'tpl', {
      podTemplate: {
        metadata: { annotations: { 'sandbox.cocoonstack.io/runtime': runtime, ...annotations } },
        spec: {
          containers: [{ name: 'main', image: 'sandbox/minimal' }],
          nodeSelector: { 'kubernetes.io/hostname': node },
        },
      },
    });
  }

  async function scenario(env: Env, runtime: 'vk-cocoon' | 'sandboxd'): Promise<void> {
    const ns = env.ns;
    const claimsOf = () => engine.list().filter((c) => c.claimRef?.startsWith(`${ns}/`));
    await createAll(env.client, vmTemplate(ns, runtime), poolManifest(ns, 'pool', 'tpl', 3));
    await waitPoolReady(ns, 'pool', 3, 120_000);
    const members = claimsOf();
    assert.equal(members.length, 3, 'three claims, one per warm Sandbox pod');
    const pids = members.map((c) => engine.vm(c.id).pid);
    assert.equal(new Set(pids).size, 3);
    for (const pid of pids) assert.ok(pid && liveQemuPids().includes(pid), `QEMU ${pid} runs`);
    if (runtime === 'sandboxd')
      assert.ok(
        members.some((c) => c.source === 'warm'),
        'served from the hot pool',
      );

    await env.client.create(SandboxClaims, claimManifest(ns, 'c1', 'pool'));
    const claim = await waitClaim(ns, 'c1', undefined, 60_000);
    const sbName = claim.status?.sandbox?.name;
    assert.ok(sbName);
    const sb = (await getSandboxOrUndefined(ns, sbName))!;
    const podName = sb.metadata.annotations?.['agents.x-k8s.io/pod-name'] || sbName;
    const rec = engine.byRef(`${ns}/${podName}`);
    assert.ok(rec, 'the claimed sandbox pod has a VM');
    const pid = engine.vm(rec.id).pid!;

    const out = await cluster.kubectl(['-n', ns, 'exec', podName, '--', 'uname', '-a']);
    const kernel = (await engine.vm(rec.id).run(['uname', '-r'])).stdout.toString().trim();
    assert.match(
      out,
      new RegExp(`^Linux \\S+ ${kernel.replace(/[.+]/g, '\\$&')} `),
      `guest kernel ${kernel} in: ${out}`,
    );
    const logs = await cluster.kubectl(['-n', ns, 'logs', podName]);
    assert.match(logs, /pod bound to microVM/);
    assert.ok(!logs.includes(out.trim()), `kubectl logs shows the exec output:\n${logs}`);

    // The pod settles: no write loop between the operator and the virtual kubelet.
    const rv1 = (await env.client.get(Pods, ns, podName)).metadata.resourceVersion;
    await new Promise((r) => setTimeout(r, 3000));
    assert.equal((await env.client.get(Pods, ns, podName)).metadata.resourceVersion, rv1, 'pod unchanged while idle');

    await env.client.delete(SandboxClaims, ns, 'c1');
    await eventually(() => liveQemuPids().includes(pid), {
      timeoutMs: 60_000,
      until: (alive) => !alive,
      what: 'the claimed VM destroyed',
    });
    assert.equal(engine.get(rec.id), undefined);
    await waitPoolReady(ns, 'pool', 3, 120_000);
    await eventually(() => claimsOf().length, { timeoutMs: 60_000, until: (n) => n === 3, what: '3 VMs again' });
  }

  it('runtime vk-cocoon: warm pool of 3 -> 3 VMs; claim, exec, logs; delete -> VM destroyed, pool refills', async () => {
    const env = await setupEnv('vke-cocoon');
    try {
      await scenario(env, 'vk-cocoon');
    } finally {
      await env.stop();
    }
  });

  it("idle policy on the template: the Pod's VM is suspended when idle, and the next kubectl exec wakes it with its files", async () => {
    const env = await setupEnv('vke-idle');
    try {
      const ns = env.ns;
      await createAll(
        env.client,
        vmTemplate(ns, 'sandboxd', { 'sandbox.cocoonstack.io/idle-hibernate-seconds': '3' }),
        poolManifest(ns, 'pool', 'tpl', 1),
      );
      await waitPoolReady(ns, 'pool', 1, 120_000);
      // While it waits in the pool, the member is never suspended: its policy starts with its claim.
      const members = engine.list().filter((r) => r.claimRef?.startsWith(`${ns}/`));
      assert.equal(members.length, 1);
      assert.equal(members[0]!.idleHibernateSeconds, undefined, 'a pool member has no idle policy yet');
      await env.client.create(SandboxClaims, claimManifest(ns, 'c1', 'pool'));
      const claim = await waitClaim(ns, 'c1', undefined, 60_000);
      const sbName = claim.status?.sandbox?.name;
      assert.ok(sbName);
      const sb = (await getSandboxOrUndefined(ns, sbName))!;
      const podName = sb.metadata.annotations?.['agents.x-k8s.io/pod-name'] || sb.metadata.name!;
      const rec = engine.byRef(`${ns}/${podName}`)!;
      assert.equal(rec.id, members[0]!.id, 'the claim adopted the pool member');
      await eventually(() => engine.get(rec.id)?.idleHibernateSeconds, {
        until: (s) => s === 3,
        timeoutMs: 30_000,
        intervalMs: 100,
        what: 'the policy reaching the claim through the Pod once adopted',
      });
      await cluster.kubectl(['-n', ns, 'exec', podName, '--', 'sh', '-c', 'echo kept > /root/idle-note']);
      await eventually(() => engine.get(rec.id)?.idleSuspended, {
        until: (s) => s === true,
        timeoutMs: 60_000,
        intervalMs: 250,
        what: "the Pod's VM suspended by its idle policy",
      });
      const woken = engine.idle.counters.woken;
      const out = await cluster.kubectl(['-n', ns, 'exec', podName, '--', 'cat', '/root/idle-note']);
      assert.equal(out.trim(), 'kept', 'kubectl exec waited for the wake and ran in the same VM state');
      assert.equal(engine.idle.counters.woken, woken + 1);
      assert.equal(engine.get(rec.id)?.hibernated, false);
    } finally {
      await env.stop();
    }
  });

  it("runtime sandboxd: the same, served from the engine's hot pool", async () => {
    engine.setTargets([{ key: MINIMAL_KEY, warm: 3 }]);
    await eventually(() => engine.warmCount(MINIMAL_KEY), {
      timeoutMs: 60_000,
      until: (n) => n === 3,
      what: '3 warm VMs in the hot pool',
    });
    const env = await setupEnv('vke-sbx');
    try {
      await scenario(env, 'sandboxd');
    } finally {
      await env.stop();
      engine.setTargets([]);
    }
  });
});
