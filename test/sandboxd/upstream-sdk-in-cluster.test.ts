/**
 * Upstream agent-sandbox's Python SDK (`k8s-agent-sandbox[grpc]==1.0.8`) in its two in-cluster modes against a
 * networked microVM, end to end on the real control plane (docs/runtime-adapter.md "How upstream's SDKs reach a
 * microVM"): `in-cluster-pod-ip` dials the Sandbox's `status.podIPs[0]`:8080/9090 (the VM's own address) and
 * `in-cluster-service` dials `status.serviceFQDN`:8080/9090 (its headless Service), no port-forward in either. This
 * process is in the host's network namespace, which routes the VM range as an in-cluster client's node would
 * (test/sandboxd/vk-pod-ip.test.ts). For the service mode the SDK runs in a private mount namespace whose
 * /etc/resolv.conf names the cluster's CoreDNS, as a Pod's does: both of its resolvers (requests' getaddrinfo and
 * grpc C-core's c-ares) then resolve the FQDN the honest way, and nothing of the machine's changes. Last, the
 * template's NetworkPolicy is what guards the unauthenticated listeners: narrowing its ingress cuts 9090 off.
 */
import assert from 'node:assert/strict';
import { promises as dns } from 'node:dns';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { KubeClient, Pods, SandboxTemplates } from '../../src/kube/index.js';
import type { Pod } from '../../src/sandboxd/vk/types.js';
import { getTestCluster, type TestCluster } from '../support/cluster.js';
import { eventually } from '../support/eventually.js';
import { startTestVirtualNode, type TestVirtualNode } from '../support/virtual-node.js';
import { BUILD_TIMEOUT_MS } from '../vm/helpers.js';
import {
  createAll,
  poolManifest,
  setupEnv,
  templateManifest,
  waitPoolReady,
  type Env,
} from '../operator/claim-support.js';
import { runSdk, SDK_VERSION, upstreamPySdk } from './upstream-sdk-support.js';

/** Ingress to the two listeners from any peer routed to the pod address (a rule without `from`), nothing else. */
const ingressOn = (...ports: number[]) => [{ ports: ports.map((port) => ({ protocol: 'TCP', port })) }];

/** Claims from the pool in MODE, runs commands and file calls, prints one JSON line of what it saw. */
const SCRIPT = `
import json, os, socket
from kubernetes import client, config
from k8s_agent_sandbox import SandboxClient
from k8s_agent_sandbox.models import SandboxdInClusterConnectionConfig

cfg = client.Configuration()
config.load_kube_config(config_file=os.environ["KUBECONFIG_PATH"], client_configuration=cfg)
sc = SandboxClient(connection_config=SandboxdInClusterConnectionConfig(mode=os.environ["MODE"]),
                   api_client=client.ApiClient(configuration=cfg))
sandbox = sc.create_sandbox(warmpool=os.environ["POOL"], namespace=os.environ["NS"], sandbox_ready_timeout=240)
out = {"podIP": sandbox.get_pod_ip(), "fqdn": sandbox.get_service_fqdn()}
try:
    r = sandbox.commands.run("echo hello world", timeout=120)
    out["echo"] = [r.exit_code, r.stdout, r.stderr]
    r = sandbox.commands.run("exit 3", timeout=60)
    out["exit3"] = r.exit_code
    sandbox.files.write("src/hello.txt", "hi in cluster\\n")
    r = sandbox.commands.run("echo $GREETING; pwd; cat hello.txt", env={"GREETING": "bonjour"}, cwd="src", timeout=60)
    out["envcwd"] = [r.exit_code, r.stdout]
    out["read"] = sandbox.files.read("src/hello.txt").decode()
    out["list"] = [[e.name, e.type, e.size] for e in sandbox.files.list("src")]
    out["exists"] = [sandbox.files.exists("src/hello.txt"), sandbox.files.exists("src/missing.txt")]
    sandbox.files.delete("src", recursive=True)
    out["after_delete"] = sandbox.files.exists("src")
    # What the SDK dialled (its gRPC channel's target), and what that name resolves to here.
    out["grpc_target"] = getattr(sandbox.connector, "_grpc_channel_target", None)
    if os.environ["MODE"] == "in-cluster-service":
        out["resolved"] = sorted({a[4][0] for a in socket.getaddrinfo(out["fqdn"], 9090, socket.AF_INET)})
finally:
    sandbox.terminate()
print(json.dumps(out))
`;

/** Whether a TCP connection to host:port is accepted within 3 s (a dropped SYN is a timeout). */
const accepts = (host: string, port: number) =>
  new Promise<boolean>((resolve) => {
    const s = connect(port, host);
    s.setTimeout(3000, () => (s.destroy(), resolve(false)));
    s.on('connect', () => (s.destroy(), resolve(true)));
    s.on('error', () => resolve(false));
  });

describe(
  `Python k8s-agent-sandbox[grpc]==${SDK_VERSION} in-cluster modes against a networked microVM`,
  { timeout: BUILD_TIMEOUT_MS + 15 * 60_000 },
  () => {
    let cluster: TestCluster;
    let client: KubeClient;
    let node: TestVirtualNode | undefined;
    let env: Env | undefined;
    let python: string;
    let tmp: string | undefined;

    before(
      async () => {
        cluster = await getTestCluster();
        client = await KubeClient.fromKubeconfig(cluster.kubeconfigPath, { qps: -1 });
        [node, python] = await Promise.all([
          startTestVirtualNode({ cluster, client, base: `upsic-${process.pid}`, podResyncMs: 2000 }),
          upstreamPySdk(),
        ]);
        env = await setupEnv('upsic');
        const vkNode = node.vk.nodes.find((n) => n.kind === 'vk-cocoon')!.name;
        await createAll(
          env.client,
          templateManifest(env.ns, 'tpl', {
            podTemplate: {
              metadata: {
                labels: { app: 'upstream-in-cluster' },
                annotations: { 'sandbox.cocoonstack.io/runtime': 'vk-cocoon', 'sandbox.cocoonstack.io/net': 'egress' },
              },
              spec: {
                containers: [
                  {
                    name: 'sandboxd',
                    image: 'sandbox/minimal',
                    ports: [
                      { name: 'rest', containerPort: 8080 },
                      { name: 'grpc', containerPort: 9090 },
                    ],
                  },
                ],
                nodeSelector: { 'kubernetes.io/hostname': vkNode },
              },
            },
            service: true, // the headless Service in-cluster-service needs (status.serviceFQDN)
            // The managed secure default admits only the router's pods, so nothing could reach the pod address:
            // a template that wants in-cluster SDK clients opens the two ports, as it would for upstream's image.
            networkPolicy: { ingress: ingressOn(8080, 9090) },
          }),
          poolManifest(env.ns, 'pool', 'tpl', 2),
        );
        await waitPoolReady(env.ns, 'pool', 2, 300_000);
        tmp = await mkdtemp(join(tmpdir(), 'upsic-'));
      },
      { timeout: BUILD_TIMEOUT_MS + 15 * 60_000 },
    );

    after(async () => {
      await env?.stop();
      await node?.stop();
      client?.close();
      if (tmp) await rm(tmp, { recursive: true, force: true });
    });

    function sdkEnv(mode: string): NodeJS.ProcessEnv {
      return {
        ...process.env,
        KUBECONFIG_PATH: cluster.kubeconfigPath,
        NS: env!.ns,
        POOL: 'pool',
        MODE: mode,
        PATH: `${dirname(cluster.binaries.kubectl ?? 'kubectl')}:${process.env.PATH ?? ''}`,
      };
    }

    function assertSession(out: Record<string, unknown>, msg: string): void {
      assert.deepEqual(out.echo, [0, 'hello world\n', ''], msg);
      assert.equal(out.exit3, 3, msg);
      assert.deepEqual(out.envcwd, [0, 'bonjour\n/workspace/src\nhi in cluster\n'], msg);
      assert.equal(out.read, 'hi in cluster\n', msg);
      assert.deepEqual(out.list, [['hello.txt', 'file', 14]], msg);
      assert.deepEqual(out.exists, [true, false], msg);
      assert.equal(out.after_delete, false, msg);
    }

    it('in-cluster-pod-ip: commands over gRPC and files over REST at the VM address', async () => {
      const { out, msg } = await runSdk(python, ['-c', SCRIPT], sdkEnv('in-cluster-pod-ip'));
      assertSession(out, msg);
      assert.match(String(out.podIP), /^\d+\.\d+\.\d+\.\d+$/, msg);
      assert.notEqual(out.podIP, cluster.hostAddress, msg);
      assert.equal(out.grpc_target, `${String(out.podIP)}:9090`, msg);
    });

    it('in-cluster-service: the headless Service FQDN, resolved by the cluster DNS', async () => {
      assert.ok(cluster.clusterDns, 'the test cluster runs CoreDNS');
      const resolv = join(tmp!, 'resolv.conf');
      await writeFile(resolv, `nameserver ${cluster.clusterDns}\n`);
      // unshare(1) makes the new mount namespace's propagation private, so the bind mount stays in it.
      const { out, msg } = await runSdk(
        'unshare',
        ['--mount', '--', 'sh', '-c', 'mount --bind "$0" /etc/resolv.conf && exec "$@"', resolv, python, '-c', SCRIPT],
        sdkEnv('in-cluster-service'),
      );
      assertSession(out, msg);
      const fqdn = String(out.fqdn);
      assert.match(fqdn, new RegExp(`^[a-z0-9-]+\\.${env!.ns}\\.svc\\.${cluster.clusterDomain}$`), msg);
      assert.equal(out.grpc_target, `${fqdn}:9090`, msg);
      assert.deepEqual(out.resolved, [out.podIP], `the FQDN names the VM address\n${msg}`);
      // The machine's own resolver does not know the name: only the cluster's DNS made the SDK's calls work.
      const local = await Promise.race([
        dns.lookup(fqdn).then(
          () => 'resolved',
          () => 'unresolved',
        ),
        new Promise<string>((r) => setTimeout(() => r('unresolved (timeout)'), 10_000)),
      ]);
      assert.match(local, /^unresolved/, `${fqdn} resolves without the cluster DNS`);
    });

    it("the template's NetworkPolicy ingress is what admits peers to the listeners", async () => {
      const ready = (p: Pod) =>
        !!p.status?.podIP && p.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True');
      const pod = await eventually(
        async () =>
          (await client.list<Pod>(Pods, env!.ns, { labelSelector: 'app=upstream-in-cluster' })).items.find(ready),
        { until: (p) => p !== undefined, timeoutMs: 300_000, what: 'a Ready pool pod with a podIP' },
      );
      const ip = pod!.status!.podIP!;
      assert.equal(await accepts(ip, 9090), true, `${ip}:9090 admitted by the template's policy`);
      await env!.client.patch(
        SandboxTemplates,
        env!.ns,
        'tpl',
        { spec: { networkPolicy: { ingress: ingressOn(8080) } } },
        'merge',
      );
      await eventually(() => accepts(ip, 9090), {
        until: (ok) => !ok,
        timeoutMs: 60_000,
        what: `${ip}:9090 dropped once the policy no longer admits it`,
      });
      assert.equal(await accepts(ip, 8080), true, `${ip}:8080 still admitted`);
    });
  },
);
