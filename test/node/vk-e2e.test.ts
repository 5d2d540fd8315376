/**
 * End to end on the real control plane and real QEMU microVMs, with the operator in-process: a SandboxTemplate
 * routed to `vk-cocoon` (then `sandboxd`), a SandboxWarmPool of 3 -> 3 Ready Sandboxes backed by 3 QEMU
 * processes; a SandboxClaim adopts one; `kubectl exec` into its Pod prints the guest kernel and `kubectl logs`
 * shows it; deleting the claim destroys that VM and the pool refills to 3.
 */
import assert from 'node:assert/strict';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { issueCert } from '../../src/cluster/index.js';
import { KubeClient, Pods, SandboxClaims } from '../../src/kube/index.js';
import { createLogger } from '../../src/log/logger.js';
import { NodeEngine } from '../../src/node/engine.js';
import { startVirtualNodes, type VirtualNodes } from '../../src/node/vk/index.js';
import { liveQemuPids } from '../../src/vmm/index.js';
import { getTestCluster, type TestCluster } from '../support/cluster.js';
import { eventually } from '../support/eventually.js';
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

const BUILD_TIMEOUT_MS = 30 * 60_000;
const KEY = { template: 'sandbox/minimal', net: 'none', size: 'small' } as const;

describe('e2e: operator + sandboxd virtual nodes + microVMs', { timeout: BUILD_TIMEOUT_MS + 6 * 60_000 }, () => {
  let cluster: TestCluster;
  let engine: NodeEngine;
  let vk: VirtualNodes;
  let dir: string;
  let client: KubeClient;
  const base = `vke-${process.pid}`;

  before(
    async () => {
      cluster = await getTestCluster();
      dir = mkdtempSync(join(tmpdir(), 'vke-'));
      chmodSync(dir, 0o755);
      const log = createLogger({ level: process.env.SBX_TEST_LOG_LEVEL ?? 'warn', name: 'vk-e2e' });
      engine = new NodeEngine({
        dataDir: join(dir, 'e'),
        nodeName: base,
        advertiseAddr: `${cluster.hostAddress}:0`,
        logger: log,
      });
      await engine.start();
      await engine.prepare(KEY);
      const serving = await issueCert(dir, cluster.pki.ca, {
        name: 'kubelet',
        commonName: `${base}-kubelet`,
        ips: [cluster.hostAddress],
        usage: 'server',
      });
      client = await KubeClient.fromKubeconfig(cluster.kubeconfigPath, { qps: -1 });
      vk = await startVirtualNodes({
        engine,
        client,
        nodeName: base,
        hostAddress: cluster.hostAddress,
        kubeletPortBase: 0,
        tls: { cert: serving.cert, key: serving.key, clientCa: cluster.pki.ca.cert },
        stateDir: join(dir, 'vk'),
        logger: log,
      });
    },
    { timeout: BUILD_TIMEOUT_MS },
  );

  after(async () => {
    await vk?.stop({ deleteNodes: true });
    await engine?.close({ destroyVms: true });
    client?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  /** The template's pod: the runtime annotation routes it; a hostname selector pins it to this test's node. */
  function vmTemplate(ns: string, runtime: 'vk-cocoon' | 'sandboxd') {
    const node = vk.nodes.find((n) => n.kind === runtime)!.name;
    return templateManifest(ns, 'tpl', {
      podTemplate: {
        metadata: { annotations: { 'sandbox.cocoonstack.io/runtime': runtime } },
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
    assert.ok(logs.includes(out.trim()), `kubectl logs shows the exec output:\n${logs}`);

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

  it("runtime sandboxd: the same, served from the engine's hot pool", async () => {
    engine.setTargets([{ key: KEY, warm: 3 }]);
    await eventually(() => engine.warmCount(KEY), {
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
