/**
 * The `standard` runtime, for real (issue 29 item 4): the shared test cluster's real node `worker-0` (kubelet +
 * containerd + runc + the CNI bridge, in the cluster's network namespace) runs a Sandbox's Pod as a container, and
 * `kubectl exec`, `logs` and `port-forward` go through kube-apiserver to that kubelet as on any cluster; the
 * Sandbox's Service resolves through the cluster DNS from another Pod; Pods end Succeeded and Failed with their
 * exit codes; deleting the Sandbox removes the container from the node.
 *
 * The real node is tainted in the shared cluster (every other test's Pods stay on kwok), so these Pods tolerate the
 * taint and select the node's label (`sandbox.cocoonstack.io/real-node`), as a user writes them in a podTemplate.
 * Their image, `localhost/sbx/busybox:1`, is built on this machine and imported into every node (no registry).
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readdir } from 'node:fs/promises';
import { request } from 'node:http';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { REAL_NODE_LABEL as REAL_NODE } from '../../src/cluster/index.js';
import { BUSYBOX_TEST_IMAGE as BUSYBOX } from '../../src/cluster/node-images.js';
import { CONTAINERD_VERSION, KUBERNETES_VERSION } from '../../src/cluster/versions.js';
import { Sandboxes } from '../../src/kube/index.js';
import { createTestNamespace, getTestCluster, type TestCluster } from '../support/cluster.js';
import { eventually } from '../support/eventually.js';
import {
  createSandbox,
  getOrUndefined,
  isReady,
  sandboxManifest,
  testClient,
  waitForSandbox,
  withOperator,
} from '../operator/sandbox-fixtures.js';

const NODE = 'worker-0';
/** Real waits on a 2-core machine shared with QEMU under TCG: generous, and bounded. */
const WAIT = 90_000;

interface ContainerStatus {
  name: string;
  ready?: boolean;
  restartCount?: number;
  state?: { terminated?: { exitCode: number; reason?: string }; running?: unknown; waiting?: { reason?: string } };
}
interface PodJson {
  metadata: { name: string; uid: string };
  spec: { nodeName?: string };
  status?: {
    phase?: string;
    podIP?: string;
    conditions?: Array<{ type: string; status: string }>;
    containerStatuses?: ContainerStatus[];
  };
}

/** What places a Pod on the real node: the toleration of its taint and a selector of its label. */
const onRealNode = {
  tolerations: [{ key: REAL_NODE, operator: 'Equal', value: 'true', effect: 'NoSchedule' }],
  nodeSelector: { [REAL_NODE]: 'true' },
};

async function getPodJson(cluster: TestCluster, ns: string, name: string): Promise<PodJson | undefined> {
  try {
    return JSON.parse(await cluster.kubectl(['-n', ns, 'get', 'pod', name, '-o', 'json'])) as PodJson;
  } catch (err) {
    if (/NotFound/.test(String(err))) return undefined;
    throw err;
  }
}

const inPodCidr = (ip: string | undefined) => /^10\.85\.\d{1,3}\.\d{1,3}$/.test(ip ?? '');

/**
 * A Sandbox with the standard runtime whose container serves `/www/hello.txt` (holding `served-<marker>`) with
 * busybox httpd on 8080, after printing `<marker>` to stdout. kubelet's readiness probe fetches the file, so Ready
 * means a real HTTP answer from inside the container.
 */
function webSandbox(ns: string, name: string, marker: string) {
  return sandboxManifest(ns, name, {
    service: true,
    podTemplate: {
      metadata: { labels: { app: 'web' }, annotations: { 'sandbox.cocoonstack.io/runtime': 'standard' } },
      spec: {
        ...onRealNode,
        terminationGracePeriodSeconds: 2,
        containers: [
          {
            name: 'main',
            image: BUSYBOX,
            command: [
              'sh',
              '-c',
              `mkdir -p /www && echo served-${marker} > /www/hello.txt && echo ${marker} && exec httpd -f -p 8080 -h /www`,
            ],
            ports: [{ containerPort: 8080, name: 'http' }],
            readinessProbe: { httpGet: { path: '/hello.txt', port: 8080 }, periodSeconds: 1 },
          },
        ],
      },
    },
  });
}

/** Create the web Sandbox and wait for it and its Pod to be Ready on the real node. */
async function startWeb(cluster: TestCluster, ns: string, name: string, marker: string): Promise<PodJson> {
  await createSandbox(webSandbox(ns, name, marker));
  const sb = await waitForSandbox(ns, name, isReady, 'the Sandbox Ready on the real node', WAIT);
  assert.equal(sb.status?.nodeName, NODE);
  const pod = await getPodJson(cluster, ns, name);
  assert.ok(pod, 'the Sandbox has its Pod');
  assert.equal(pod.spec.nodeName, NODE, 'the Pod is bound to the real node');
  assert.equal(pod.status?.phase, 'Running');
  assert.ok(inPodCidr(pod.status?.podIP), `a pod IP from the CNI bridge (10.85.0.0/16), got ${pod.status?.podIP}`);
  assert.deepEqual(sb.status?.podIPs, [pod.status?.podIP]);
  const main = pod.status?.containerStatuses?.find((c) => c.name === 'main');
  assert.equal(main?.ready, true, 'kubelet probed the container and found it ready');
  assert.ok(main?.state?.running, 'the container is running');
  return pod;
}

/** A plain Pod on the real node running `script` in busybox once (restartPolicy Never). */
function oneShotPod(ns: string, name: string, script: string): string {
  return JSON.stringify({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: ns },
    spec: {
      ...onRealNode,
      restartPolicy: 'Never',
      containers: [{ name: 'main', image: BUSYBOX, command: ['sh', '-c', script] }],
    },
  });
}

async function waitPhase(cluster: TestCluster, ns: string, name: string, phases: string[]): Promise<PodJson> {
  return (await eventually(() => getPodJson(cluster, ns, name), {
    until: (p) => phases.includes(p?.status?.phase ?? ''),
    what: `pod ${name} ${phases.join(' or ')}`,
    timeoutMs: WAIT,
    intervalMs: 500,
  }))!;
}

/** GET http://127.0.0.1:<port><path>: the status and the body. */
function httpGet(port: number, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, timeout: 10_000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error('timed out')));
    req.on('error', reject);
    req.end();
  });
}

/** The directories `pod<uid>` below the node's pod cgroups, in the pids hierarchy (every process is in it). */
async function podCgroups(cluster: TestCluster, uid: string): Promise<string[]> {
  const root = join('/sys/fs/cgroup/pids', `${cluster.netns}-${NODE}`);
  const found: string[] = [];
  const walk = async (dir: string, depth: number): Promise<void> => {
    if (depth > 4) return;
    for (const e of await readdir(dir, { withFileTypes: true }).catch(() => []))
      if (e.isDirectory()) {
        if (e.name === `pod${uid}`) found.push(join(dir, e.name));
        else await walk(join(dir, e.name), depth + 1);
      }
  };
  await walk(root, 0);
  return found;
}

describe('the standard runtime on a real node', { concurrency: 4 }, () => {
  it('worker-0 is a real kubelet node: Ready, our kubelet and containerd, the namespace address, not kwok', async () => {
    const cluster = await getTestCluster();
    const node = JSON.parse(await cluster.kubectl(['get', 'node', NODE, '-o', 'json'])) as {
      metadata: { labels?: Record<string, string>; annotations?: Record<string, string> };
      spec: { taints?: Array<{ key: string; value?: string; effect: string }> };
      status: {
        conditions: Array<{ type: string; status: string }>;
        nodeInfo: { kubeletVersion: string; containerRuntimeVersion: string };
        addresses: Array<{ type: string; address: string }>;
      };
    };
    assert.equal(node.status.conditions.find((c) => c.type === 'Ready')?.status, 'True');
    assert.equal(node.status.nodeInfo.kubeletVersion, KUBERNETES_VERSION);
    assert.equal(node.status.nodeInfo.containerRuntimeVersion, `containerd://${CONTAINERD_VERSION.replace(/^v/, '')}`);
    assert.equal(node.status.addresses.find((a) => a.type === 'InternalIP')?.address, cluster.apiAddress);
    assert.equal(node.metadata.labels?.[REAL_NODE], 'true');
    assert.deepEqual(
      node.spec.taints?.filter((t) => t.key === REAL_NODE),
      [{ key: REAL_NODE, value: 'true', effect: 'NoSchedule' }],
    );
    // Not one of kwok's: no simulation label or annotation, and kwok does not manage it.
    assert.equal(node.metadata.labels?.['sandbox.cocoonstack.io/simulated'], undefined);
    assert.equal(node.metadata.labels?.type, undefined);
    assert.equal(node.metadata.annotations?.['sandbox.cocoonstack.io/simulation'], undefined);
    assert.deepEqual(cluster.realNodes, [NODE]);
    assert.ok(!cluster.simulatedNodes.includes(NODE));
  });

  it('a standard Sandbox runs a real container: Ready, kubectl exec, logs and port-forward through the apiserver', () =>
    withOperator('real-web', async ({ ns }) => {
      const cluster = await getTestCluster();
      await startWeb(cluster, ns, 'web', 'marker-4f1c');

      // exec: kube-apiserver → kubelet → containerd; stdout, stderr and the exit code come back.
      const out = await cluster.kubectl([
        '-n',
        ns,
        'exec',
        'web',
        '--',
        'sh',
        '-c',
        'echo out-$((6*7)); cat /www/hello.txt',
      ]);
      assert.equal(out, 'out-42\nserved-marker-4f1c\n');
      await assert.rejects(
        cluster.kubectl(['-n', ns, 'exec', 'web', '--', 'sh', '-c', 'echo oops >&2; exit 7']),
        (err: Error) => {
          assert.match(err.message, /oops/);
          assert.match(err.message, /exit code 7/);
          return true;
        },
      );
      const echoed = await cluster.kubectl(['-n', ns, 'exec', '-i', 'web', '--', 'cat'], 'piped stdin\n');
      assert.equal(echoed, 'piped stdin\n');
      // The container's own UTS namespace: its hostname is the Pod's.
      assert.equal((await cluster.kubectl(['-n', ns, 'exec', 'web', '--', 'hostname'])).trim(), 'web');

      // logs: the container's stdout, as kubelet wrote it to the node's pod log directory.
      const logs = await cluster.kubectl(['-n', ns, 'logs', 'web']);
      assert.match(logs, /^marker-4f1c$/m);

      // port-forward: the local port kubectl picked, then a real HTTP answer from busybox httpd in the container.
      const kubectl = cluster.binaries.kubectl ?? 'kubectl';
      const pf = spawn(
        kubectl,
        [`--kubeconfig=${cluster.kubeconfigPath}`, '-n', ns, 'port-forward', 'pod/web', ':8080'],
        {
          stdio: ['ignore', 'pipe', 'pipe'],
        },
      );
      let pfOut = '';
      pf.stdout.on('data', (b: Buffer) => (pfOut += b.toString()));
      pf.stderr.on('data', (b: Buffer) => (pfOut += b.toString()));
      try {
        const port = await eventually(
          () => {
            const m = /Forwarding from 127\.0\.0\.1:(\d+) -> 8080/.exec(pfOut);
            if (!m) throw new Error(`port-forward not ready yet: ${pfOut}`);
            return Number(m[1]);
          },
          { timeoutMs: 30_000, what: 'kubectl port-forward listening' },
        );
        const res = await eventually(() => httpGet(port, '/hello.txt'), {
          until: (r) => r.status === 200,
          timeoutMs: 30_000,
          what: `the served file through port-forward (${pfOut})`,
        });
        assert.equal(res.body, 'served-marker-4f1c\n');
      } finally {
        pf.kill('SIGTERM');
      }
    }));

  it("the Sandbox's serviceFQDN resolves and answers from another Pod, which ends Succeeded", () =>
    withOperator('real-dns', async ({ ns }) => {
      const cluster = await getTestCluster();
      const web = await startWeb(cluster, ns, 'dnsweb', 'marker-9a2e');
      const sb = await waitForSandbox(ns, 'dnsweb', (s) => !!s.status?.serviceFQDN, 'serviceFQDN', WAIT);
      const fqdn = sb.status!.serviceFQDN!;
      assert.equal(fqdn, `dnsweb.${ns}.svc.cluster.local`);
      // busybox's nslookup asks the Pod's resolver (CoreDNS, from kubelet's clusterDNS) itself; nc then fetches the
      // file from the address it got (static busybox's own name lookups need NSS modules the image does not have).
      const script = [
        `nslookup ${fqdn} > /tmp/ns.txt || { cat /tmp/ns.txt; echo nslookup-failed; exit 1; }`,
        'cat /tmp/ns.txt',
        "ip=$(sed -n 's/^Address: *\\([0-9.]*\\)$/\\1/p' /tmp/ns.txt | tail -n 1)",
        'echo "resolved=$ip"',
        `printf 'GET /hello.txt HTTP/1.0\\r\\n\\r\\n' | nc -w 10 "$ip" 8080`,
        'echo',
        'grep -q "^nameserver" /etc/resolv.conf && sed -n "s/^nameserver /dns=/p" /etc/resolv.conf',
      ].join('\n');
      await cluster.kubectl(['apply', '-f', '-'], oneShotPod(ns, 'client', script));
      const pod = await waitPhase(cluster, ns, 'client', ['Succeeded', 'Failed']);
      const logs = await cluster.kubectl(['-n', ns, 'logs', 'client']);
      assert.equal(pod.status?.phase, 'Succeeded', `the client Pod's log:\n${logs}`);
      assert.equal(pod.status?.containerStatuses?.[0]?.state?.terminated?.exitCode, 0);
      assert.match(logs, new RegExp(`^resolved=${web.status!.podIP!.replaceAll('.', '\\.')}$`, 'm'));
      assert.match(logs, /^HTTP\/1\.[01] 200 OK/m);
      assert.match(logs, /^served-marker-9a2e$/m);
      assert.match(logs, new RegExp(`^dns=${cluster.clusterDns?.replaceAll('.', '\\.')}$`, 'm'), 'Pods use CoreDNS');
    }));

  it('a Pod whose command exits 3 ends Failed with exit code 3', async () => {
    const cluster = await getTestCluster();
    const ns = await createTestNamespace('real-exit');
    try {
      await cluster.kubectl(['apply', '-f', '-'], oneShotPod(ns.name, 'fails', 'echo about-to-fail; exit 3'));
      const pod = await waitPhase(cluster, ns.name, 'fails', ['Succeeded', 'Failed']);
      assert.equal(pod.status?.phase, 'Failed');
      assert.equal(pod.spec.nodeName, NODE);
      const terminated = pod.status?.containerStatuses?.[0]?.state?.terminated;
      assert.equal(terminated?.exitCode, 3);
      assert.equal(terminated?.reason, 'Error');
      assert.equal(pod.status?.containerStatuses?.[0]?.restartCount, 0);
      assert.equal(await cluster.kubectl(['-n', ns.name, 'logs', 'fails']), 'about-to-fail\n');
    } finally {
      await ns.cleanup();
    }
  });

  it('deleting the Sandbox removes its Pod, and its container and cgroup from the node', () =>
    withOperator('real-del', async ({ ns }) => {
      const cluster = await getTestCluster();
      const pod = await startWeb(cluster, ns, 'gone', 'marker-77d0');
      // The container runs in the node's own cgroup subtree (kubelet's cgroupRoot), under a directory for the Pod.
      const dirs = await eventually(() => podCgroups(cluster, pod.metadata.uid), {
        until: (d) => d.length === 1,
        what: `the cgroup of pod ${pod.metadata.uid} below the node's subtree`,
        timeoutMs: WAIT,
      });
      await (await testClient()).delete(Sandboxes, ns, 'gone');
      await eventually(() => getPodJson(cluster, ns, 'gone'), {
        until: (p) => p === undefined,
        what: 'the Pod deleted',
        timeoutMs: WAIT,
        intervalMs: 500,
      });
      assert.equal(await getOrUndefined(Sandboxes, ns, 'gone'), undefined);
      await eventually(() => podCgroups(cluster, pod.metadata.uid), {
        until: (d) => d.length === 0,
        what: `the node to remove the Pod's cgroup ${dirs[0]}`,
        timeoutMs: WAIT,
        intervalMs: 500,
      });
    }));
});
