/**
 * The virtual kubelet against the real control plane and real QEMU microVMs: node registration and lease, plain
 * Pods bound to the virtual nodes becoming VMs (status patched back), `kubectl exec` (plain and -it) and
 * `kubectl logs` through the apiserver (without exec traffic), port-forward, a Pod naming no template, deletion
 * destroying the VM, and client-certificate authentication of the kubelet API.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { request } from 'node:https';
import { createServer, type AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { KubeClient, Leases, Nodes, Pods } from '../../src/kube/index.js';
import type { NodeEngine } from '../../src/sandboxd/engine.js';
import type { VirtualNodes } from '../../src/sandboxd/vk/index.js';
import type { Lease, Node, Pod } from '../../src/sandboxd/vk/types.js';
import { liveQemuPids } from '../../src/vmm/index.js';
import { createTestNamespace, getTestCluster, type TestCluster } from '../support/cluster.js';
import { eventually } from '../support/eventually.js';
import { BUILD_TIMEOUT_MS } from '../vm/helpers.js';
import { MINIMAL_KEY, startTestVirtualNode, type TestVirtualNode } from '../support/virtual-node.js';

function podManifest(
  ns: string,
  name: string,
  node: string,
  image: string,
  annotations: Record<string, string> = {},
): Pod {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: ns, annotations },
    spec: {
      nodeName: node,
      containers: [{ name: 'main', image }],
      tolerations: [{ key: 'virtual-kubelet.io/provider', operator: 'Exists', effect: 'NoSchedule' }],
    },
  };
}

describe('virtual kubelet: nodes, pods as microVMs, kubelet API', { timeout: BUILD_TIMEOUT_MS + 5 * 60_000 }, () => {
  let ns: Awaited<ReturnType<typeof createTestNamespace>>;
  let client: KubeClient;
  let cluster: TestCluster;
  let engine: NodeEngine;
  let vk: VirtualNodes;
  let node: TestVirtualNode | undefined;
  let vkNode: string;
  let sbxNode: string;
  const base = `vkt-${process.pid}`;

  before(
    async () => {
      cluster = await getTestCluster();
      ns = await createTestNamespace('vk');
      client = await KubeClient.fromKubeconfig(cluster.kubeconfigPath, { qps: -1 });
      node = await startTestVirtualNode({ cluster, client, base, podResyncMs: 2000 });
      ({ engine, vk } = node);
      vkNode = vk.nodes.find((n) => n.kind === 'vk-cocoon')!.name;
      sbxNode = vk.nodes.find((n) => n.kind === 'sandboxd')!.name;
    },
    { timeout: BUILD_TIMEOUT_MS },
  );

  after(async () => {
    await node?.stop();
    client?.close();
    await ns?.cleanup();
  });

  it("registers two Ready nodes with the runtime adapter's labels and taints, a WebSocket-capable kubelet, and leases", async () => {
    // The node lifecycle controller taints a new node not-ready until it has seen it Ready; then only ours remain.
    const vkn = await eventually(() => client.get<Node>(Nodes, undefined, vkNode), {
      until: (n) => n.spec?.taints?.length === 1,
      what: 'only our taint',
    });
    assert.equal(vkn.metadata.labels?.['node.kubernetes.io/instance-type'], 'virtual-node');
    assert.equal(vkn.metadata.labels?.type, 'virtual-kubelet');
    assert.deepEqual(vkn.spec?.taints, [{ key: 'virtual-kubelet.io/provider', value: 'cocoon', effect: 'NoSchedule' }]);
    const sn = await eventually(() => client.get<Node>(Nodes, undefined, sbxNode), {
      until: (n) => n.spec?.taints?.length === 1,
      what: 'only our taint',
    });
    assert.equal(sn.metadata.labels?.['sandbox.cocoonstack.io/runtime'], 'sandboxd');
    assert.deepEqual(sn.spec?.taints, [
      { key: 'virtual-kubelet.io/provider', value: 'sandboxd', effect: 'NoSchedule' },
    ]);
    for (const n of [vkn, sn]) {
      assert.equal(n.status?.conditions?.find((c) => c.type === 'Ready')?.status, 'True');
      assert.deepEqual(n.status?.addresses?.[0], { type: 'InternalIP', address: cluster.hostAddress });
      assert.ok((n.status?.daemonEndpoints?.kubeletEndpoint?.Port ?? 0) > 0);
      assert.deepEqual(n.status?.declaredFeatures, ['ExtendWebSocketsToKubelet']);
      const lease = await client.get<Lease>(Leases, 'kube-node-lease', n.metadata.name ?? '');
      assert.equal(lease.spec.holderIdentity, n.metadata.name);
      assert.ok(Date.now() - Date.parse(lease.spec.renewTime ?? '') < 30_000);
    }
  });

  it('runs a vk-cocoon Pod as a microVM: Running, Ready, podIP, container status with the claim id', async () => {
    const qemuBefore = liveQemuPids().length;
    await client.create(Pods, podManifest(ns.name, 'web', vkNode, 'sandbox/minimal:latest'));
    const pod = await eventually(() => client.get<Pod>(Pods, ns.name, 'web'), {
      timeoutMs: 60_000,
      until: (p) => p.status?.conditions?.find((c) => c.type === 'Ready')?.status === 'True',
      what: 'pod web Ready',
    });
    assert.equal(pod.status?.phase, 'Running');
    assert.equal(pod.status?.podIP, cluster.hostAddress);
    const cs = pod.status?.containerStatuses?.[0];
    assert.match(cs?.imageID ?? '', /^sandboxd:\/\/sb_[0-9a-f]+$/);
    assert.equal(cs?.ready, true);
    assert.ok(cs?.state.running?.startedAt);
    const claim = engine.byRef(`${ns.name}/web`);
    assert.ok(claim, 'the engine holds a claim for the pod');
    assert.equal(cs?.imageID, `sandboxd://${claim.id}`);
    const annotated = await eventually(() => client.get<Pod>(Pods, ns.name, 'web'), {
      until: (p) => p.metadata.annotations?.['sandbox.cocoonstack.io/claim-id'] === claim.id,
      what: 'claim-id annotation',
    });
    assert.equal(annotated.metadata.annotations?.['vm.cocoonstack.io/id'], claim.vmId);
    assert.ok(liveQemuPids().length >= qemuBefore, 'a QEMU process backs the pod');
    // The pod's VM is primed in the background once it runs, so the first exec of whoever uses it is a warm one.
    await eventually(async () => engine.isPrimed(claim.id), { until: (p) => p, what: "the pod's VM primed" });
  });

  it('does not rewrite an unchanged status (no write loop)', async () => {
    const a = await client.get<Pod>(Pods, ns.name, 'web');
    await new Promise((r) => setTimeout(r, 5000)); // > 2 resyncs
    const b = await client.get<Pod>(Pods, ns.name, 'web');
    assert.equal(b.metadata.resourceVersion, a.metadata.resourceVersion);
  });

  it('kubectl exec -- uname -a prints the guest kernel, and exit codes come back', async () => {
    const out = await cluster.kubectl(['-n', ns.name, 'exec', 'web', '--', 'uname', '-a']);
    assert.match(out, /^Linux sandbox 6\.\d+\.\d+/);
    const vm = engine.vm(engine.byRef(`${ns.name}/web`)!.id);
    const guest = (await vm.run(['uname', '-r'])).stdout.toString().trim();
    assert.ok(out.includes(guest), `exec output names the guest kernel ${guest}`);
    await assert.rejects(
      cluster.kubectl(['-n', ns.name, 'exec', 'web', '--', 'sh', '-c', 'echo oops >&2; exit 7']),
      (err: Error) => {
        assert.match(err.message, /oops/);
        assert.match(err.message, /exit code 7/);
        return true;
      },
    );
    const echoed = await cluster.kubectl(['-n', ns.name, 'exec', '-i', 'web', '--', 'cat'], 'piped stdin\n');
    assert.equal(echoed, 'piped stdin\n');
  });

  it('kubectl exec -it sh gives an interactive shell inside the VM', async () => {
    const kubectl = cluster.binaries.kubectl ?? 'kubectl';
    const cmd = `${kubectl} --kubeconfig=${cluster.kubeconfigPath} -n ${ns.name} exec -it web -- sh`;
    const child = spawn('script', ['-qec', cmd, '/dev/null'], { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (b: Buffer) => (out += b.toString()));
    child.stderr.on('data', (b: Buffer) => (out += b.toString()));
    await eventually(() => out, { timeoutMs: 20_000, until: (o) => o.includes('# '), what: 'a shell prompt' });
    child.stdin.write('echo tty=$(tty); stty size; exit 5\n');
    const code = await new Promise<number | null>((resolve) => child.on('exit', (c) => resolve(c)));
    assert.match(out, /tty=\/dev\/pts\/\d+/);
    assert.equal(code, 5, `kubectl exits with the shell's code; output: ${out}`);
  });

  it("kubectl logs shows the node's lines about the pod, never an exec session's command, input or output", async () => {
    await cluster.kubectl(
      ['-n', ns.name, 'exec', '-i', 'web', '--', 'sh', '-c', 'read x; echo "out-$x"; echo "err-$x" >&2'],
      'exec-secret\n',
    );
    const logs = await cluster.kubectl(['-n', ns.name, 'logs', 'web']);
    assert.match(logs, /pod bound to microVM/);
    for (const leaked of [/exec-secret/, /Linux sandbox/, /uname/, /\[sandboxd\] exec/])
      assert.doesNotMatch(logs, leaked, `the pod log shows exec traffic:\n${logs}`);
    const tail = await cluster.kubectl(['-n', ns.name, 'logs', 'web', '--tail=1', '--timestamps']);
    assert.equal(tail.trim().split('\n').length, 1);
    assert.match(tail, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z /);
    // --follow streams what is there and stays open (appended lines: the PodLogs unit test).
    const kubectl = cluster.binaries.kubectl ?? 'kubectl';
    const follow = spawn(
      kubectl,
      [`--kubeconfig=${cluster.kubeconfigPath}`, '-n', ns.name, 'logs', '-f', '--tail=1', 'web'],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let followed = '';
    follow.stdout.on('data', (b: Buffer) => (followed += b.toString()));
    try {
      await eventually(() => followed, {
        timeoutMs: 10_000,
        until: (f) => f.trim().length > 0,
        what: 'kubectl logs -f output',
      });
      await new Promise((r) => setTimeout(r, 500));
      assert.equal(follow.exitCode, null, 'kubectl logs -f is still following');
    } finally {
      follow.kill('SIGTERM');
    }
  });

  it('kubectl port-forward reaches a TCP server inside the VM', async () => {
    // busybox nc as a one-shot server in the guest
    const vm = engine.vm(engine.byRef(`${ns.name}/web`)!.id);
    vm.exec(['sh', '-c', 'while true; do echo hello-from-guest | nc -l -p 8080; done'], { collect: false });
    const free = await new Promise<number>((resolve) => {
      const s = createServer().listen(0, '127.0.0.1', () => {
        const p = (s.address() as AddressInfo).port;
        s.close(() => resolve(p));
      });
    });
    const kubectl = cluster.binaries.kubectl ?? 'kubectl';
    const pf = spawn(
      kubectl,
      [`--kubeconfig=${cluster.kubeconfigPath}`, '-n', ns.name, 'port-forward', 'pod/web', `${free}:8080`],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let pfOut = '';
    pf.stdout.on('data', (b: Buffer) => (pfOut += b.toString()));
    pf.stderr.on('data', (b: Buffer) => (pfOut += b.toString()));
    try {
      await eventually(() => pfOut, {
        timeoutMs: 15_000,
        until: (o) => o.includes('Forwarding from'),
        what: 'port-forward ready',
      });
      const got = await eventually(
        () =>
          new Promise<string>((resolve, reject) => {
            const net = import('node:net');
            void net.then(({ connect }) => {
              const s = connect(free, '127.0.0.1');
              let data = '';
              s.on('data', (b) => (data += b.toString()));
              s.on('end', () => resolve(data));
              s.on('error', reject);
              setTimeout(() => s.end(), 3000);
            });
          }),
        {
          timeoutMs: 20_000,
          until: (d) => d.includes('hello-from-guest'),
          what: `guest data through port-forward (${pfOut})`,
        },
      );
      assert.match(got, /hello-from-guest/);
    } finally {
      pf.kill('SIGTERM');
    }
  });

  it('a Pod whose image names no template gets a clear reason and no VM', async () => {
    const claimsBefore = engine.claimedCount;
    await client.create(Pods, podManifest(ns.name, 'bad', vkNode, 'nginx:1.27'));
    const pod = await eventually(() => client.get<Pod>(Pods, ns.name, 'bad'), {
      until: (p) => p.status?.containerStatuses?.[0]?.state.waiting?.reason === 'UnknownTemplate',
      what: 'UnknownTemplate on the pod',
    });
    assert.equal(pod.status?.phase, 'Pending');
    assert.match(pod.status?.containerStatuses?.[0]?.state.waiting?.message ?? '', /sandbox\/minimal/);
    assert.equal(engine.claimedCount, claimsBefore);
    const described = await eventually(() => cluster.kubectl(['-n', ns.name, 'describe', 'pod', 'bad']), {
      until: (d) => d.includes('UnknownTemplate'),
      what: 'a Warning event on the pod',
    });
    assert.match(described, /Warning\s+UnknownTemplate/);
    assert.equal(engine.byRef(`${ns.name}/bad`), undefined);
    await client.delete(Pods, ns.name, 'bad');
    await eventually(
      () =>
        client.get<Pod>(Pods, ns.name, 'bad').then(
          () => false,
          () => true,
        ),
      { until: (gone) => gone, what: 'bad pod gone' },
    );
  });

  it('a sandboxd Pod claims from the hot pool and honours the ttl annotation', async () => {
    engine.setTargets([{ key: MINIMAL_KEY, warm: 1 }]);
    await eventually(() => engine.warmCount(MINIMAL_KEY), {
      timeoutMs: 30_000,
      until: (n) => n === 1,
      what: 'one warm VM',
    });
    await client.create(
      Pods,
      podManifest(ns.name, 'hot', sbxNode, 'sandbox/minimal', {
        'sandbox.cocoonstack.io/runtime': 'sandboxd',
        'sandbox.cocoonstack.io/template': 'sandbox/minimal',
        'sandbox.cocoonstack.io/ttl-seconds': '600',
      }),
    );
    await eventually(() => client.get<Pod>(Pods, ns.name, 'hot'), {
      timeoutMs: 60_000,
      until: (p) => p.status?.conditions?.find((c) => c.type === 'Ready')?.status === 'True',
      what: 'pod hot Ready',
    });
    const rec = engine.byRef(`${ns.name}/hot`);
    assert.equal(rec?.source, 'warm');
    const left = Date.parse(rec!.deadline) - Date.now();
    assert.ok(left > 590_000 && left <= 600_000, `lease of ~600 s (got ${left} ms)`);
    const out = await cluster.kubectl(['-n', ns.name, 'exec', 'hot', '--', 'cat', '/proc/version']);
    assert.match(out, /^Linux version/);
    engine.setTargets([]);
  });

  it("the kubelet API's /run takes only POST and only the pod's own UID", async () => {
    const uid = (await client.get<Pod>(Pods, ns.name, 'web')).metadata.uid!;
    const admin = cluster.pki.apiserverKubeletClient;
    const run = (method: string, path: string) =>
      new Promise<{ status: number; body: string }>((resolve, reject) => {
        const req = request(
          {
            host: cluster.hostAddress,
            port: vk.nodes.find((n) => n.name === vkNode)!.port,
            method,
            path,
            ca: readFileSync(cluster.pki.ca.cert),
            cert: readFileSync(admin.cert),
            key: readFileSync(admin.key),
          },
          (res) => {
            const chunks: Buffer[] = [];
            res.on('data', (c: Buffer) => chunks.push(c));
            res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString() }));
          },
        );
        req.on('error', reject);
        req.end();
      });
    const cmd = (c: string) => `?cmd=${encodeURIComponent(c)}`;
    const get = await run('GET', `/run/${ns.name}/web/main${cmd('touch /tmp/run-by-get')}`);
    assert.equal(get.status, 405, get.body);
    const stale = await run('POST', `/run/${ns.name}/web/not-${uid}/main${cmd('touch /tmp/run-by-stale-uid')}`);
    assert.equal(stale.status, 404, stale.body);
    assert.match(stale.body, /UID/);
    const malformed = await run('POST', `/run/${ns.name}/%E0%A4%A/main${cmd('touch /tmp/run-by-malformed')}`);
    assert.equal(malformed.status, 400, malformed.body);
    assert.match(malformed.body, /invalid percent-encoding/);
    // Neither ran; the pod's own UID (and no UID, like the kubelet) does.
    const ls = await run('POST', `/run/${ns.name}/web/${uid}/main${cmd('ls /tmp')}`);
    assert.equal(ls.status, 200, ls.body);
    assert.doesNotMatch(ls.body, /run-by-/);
    assert.equal((await run('POST', `/run/${ns.name}/web/main${cmd('echo hi')}`)).body.trim(), 'hi');
  });

  it('deleting a Pod destroys its VM and removes the Pod', async () => {
    const rec = engine.byRef(`${ns.name}/web`)!;
    const vmPid = engine.vm(rec.id).pid;
    assert.ok(vmPid);
    await client.delete(Pods, ns.name, 'web');
    await eventually(
      () =>
        client.get<Pod>(Pods, ns.name, 'web').then(
          () => false,
          () => true,
        ),
      { timeoutMs: 30_000, until: (gone) => gone, what: 'pod web gone' },
    );
    assert.equal(engine.byRef(`${ns.name}/web`), undefined);
    await eventually(() => liveQemuPids().includes(vmPid), {
      until: (alive) => !alive,
      what: 'QEMU of the pod exited',
    });
    await client.delete(Pods, ns.name, 'hot');
    await eventually(() => engine.byRef(`${ns.name}/hot`), {
      timeoutMs: 30_000,
      until: (r) => r === undefined,
      what: 'hot pod released',
    });
  });

  it("the kubelet API rejects clients without a cluster-CA certificate (401) and serves the apiserver's", async () => {
    const port = vk.nodes[0]!.port;
    const call = (opts: { cert?: string; key?: string }) =>
      new Promise<number>((resolve, reject) => {
        const req = request(
          {
            host: cluster.hostAddress,
            port,
            path: '/healthz',
            ca: readFileSync(cluster.pki.ca.cert),
            ...(opts.cert ? { cert: readFileSync(opts.cert), key: readFileSync(opts.key!) } : {}),
          },
          (res) => {
            res.resume();
            resolve(res.statusCode ?? 0);
          },
        );
        req.on('error', reject);
        req.end();
      });
    assert.equal(await call({}), 401);
    assert.equal(
      await call({ cert: cluster.pki.apiserverKubeletClient.cert, key: cluster.pki.apiserverKubeletClient.key }),
      200,
    );
  });
});
