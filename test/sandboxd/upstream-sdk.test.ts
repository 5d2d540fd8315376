/**
 * Upstream agent-sandbox's own Python SDK (`k8s-agent-sandbox[grpc]`, from PyPI) against a microVM, end to end on the
 * real control plane: a SandboxTemplate routed to vk-cocoon whose container declares 8080 and 9090 (upstream's
 * sandboxd ports) feeds a warm pool; the SDK claims a sandbox from it (SandboxClaim + watch), opens its pod tunnel
 * (`kubectl port-forward pod/<pod> :8080 :9090` through our virtual kubelet into the guest) and uses upstream
 * sandboxd as served by the guest agent: commands over gRPC Execute, files over REST (docs/runtime-adapter.md "How
 * upstream's SDKs reach a microVM").
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, rename } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { readClusterEnvironment } from '../../src/cluster/index.js';
import { KubeClient } from '../../src/kube/index.js';
import type { VirtualNodes } from '../../src/sandboxd/vk/index.js';
import { getTestCluster, type TestCluster } from '../support/cluster.js';
import { BUILD_TIMEOUT_MS } from '../vm/helpers.js';
import { startTestVirtualNode, type TestVirtualNode } from '../support/virtual-node.js';
import {
  createAll,
  poolManifest,
  setupEnv,
  templateManifest,
  waitPoolReady,
  type Env,
} from '../operator/claim-support.js';
import { run, runSdk as runSdkWith, SDK_VERSION, upstreamPySdk } from './upstream-sdk-support.js';

/**
 * upstream-go-sdk/ built against the Go SDK at the version its go.mod pins (modules through the Go module proxy, into
 * the default module cache), cached by the hash of its sources; the binary's path.
 */
async function upstreamGoSdk(): Promise<string> {
  const src = fileURLToPath(new URL('./upstream-go-sdk/', import.meta.url));
  const hash = createHash('sha256');
  for (const f of ['main.go', 'go.mod', 'go.sum']) hash.update(f).update(readFileSync(join(src, f)));
  const bin = join(readClusterEnvironment().cacheDir, 'upstream-go-sdk', hash.digest('hex').slice(0, 16), 'sdk');
  if (!existsSync(bin)) {
    await mkdir(dirname(bin), { recursive: true });
    const tmp = `${bin}.tmp-${process.pid}`;
    await run(process.env.GO ?? 'go', ['build', '-o', tmp, '.'], {
      cwd: src,
      env: { ...process.env, CGO_ENABLED: '0', GOFLAGS: '-mod=mod' },
      timeout: 20 * 60_000,
    });
    await rename(tmp, bin);
  }
  return bin;
}

/** The script: claims from the pool, runs every call the brief names, prints one JSON line of what it saw. */
const SCRIPT = `
import json, os, sys
from kubernetes import client, config
from k8s_agent_sandbox import SandboxClient
from k8s_agent_sandbox.models import SandboxdPodTunnelConnectionConfig

cfg = client.Configuration()
config.load_kube_config(config_file=os.environ["KUBECONFIG_PATH"], client_configuration=cfg)
sc = SandboxClient(connection_config=SandboxdPodTunnelConnectionConfig(), api_client=client.ApiClient(configuration=cfg))
sandbox = sc.create_sandbox(warmpool=os.environ["POOL"], namespace=os.environ["NS"], sandbox_ready_timeout=240)
out = {}
try:
    r = sandbox.commands.run("echo hello world", timeout=120)
    out["echo"] = [r.exit_code, r.stdout, r.stderr]
    r = sandbox.commands.run("exit 3", timeout=60)
    out["exit3"] = r.exit_code
    sandbox.files.write("src/hello.txt", "hi from python\\n")
    r = sandbox.commands.run("echo $GREETING; pwd; cat hello.txt", env={"GREETING": "bonjour"}, cwd="src", timeout=60)
    out["envcwd"] = [r.exit_code, r.stdout]
    r = sandbox.commands.run("pwd; id -u", timeout=60)
    out["root"] = r.stdout
    out["read"] = sandbox.files.read("src/hello.txt").decode()
    sandbox.files.write("src/b.bin", bytes([0, 1, 2, 255]))
    out["readbin"] = list(sandbox.files.read("src/b.bin"))
    out["list"] = [[e.name, e.type, e.size, e.mode] for e in sandbox.files.list("src")]
    out["exists"] = [sandbox.files.exists("src/hello.txt"), sandbox.files.exists("src/missing.txt")]
    try:
        sandbox.files.delete("src")
        out["delete_nonrecursive"] = "no error"
    except Exception as e:
        out["delete_nonrecursive"] = getattr(e, "status_code", repr(e))
    sandbox.files.delete("src", recursive=True)
    out["after_delete"] = sandbox.files.exists("src")
    try:
        sandbox.commands.run("true", cwd="../..", timeout=60)
        out["escape"] = "no error"
    except Exception as e:
        out["escape"] = str(e)
finally:
    sandbox.terminate()
print(json.dumps(out))
`;

describe('upstream SDKs against upstream sandboxd in a microVM', { timeout: BUILD_TIMEOUT_MS + 15 * 60_000 }, () => {
  let cluster: TestCluster;
  let client: KubeClient;
  let node: TestVirtualNode | undefined;
  let vk: VirtualNodes;
  let env: Env | undefined;
  let python: string;
  let goSdk: string;

  before(
    async () => {
      cluster = await getTestCluster();
      client = await KubeClient.fromKubeconfig(cluster.kubeconfigPath, { qps: -1 });
      [node, python, goSdk] = await Promise.all([
        startTestVirtualNode({ cluster, client, base: `ups-${process.pid}`, podResyncMs: 2000 }),
        upstreamPySdk(SDK_VERSION),
        upstreamGoSdk(),
      ]);
      vk = node.vk;
      env = await setupEnv('ups');
      const ns = env.ns;
      const vkNode = vk.nodes.find((n) => n.kind === 'vk-cocoon')!.name;
      await createAll(
        env.client,
        templateManifest(ns, 'tpl', {
          podTemplate: {
            metadata: { annotations: { 'sandbox.cocoonstack.io/runtime': 'vk-cocoon' } },
            spec: {
              // Upstream's sandboxd container, as its manifests declare it; the image is our guest template.
              containers: [
                {
                  name: 'sandboxd',
                  image: 'sandbox/minimal',
                  ports: [
                    { name: 'rest', containerPort: 8080 },
                    { name: 'grpc', containerPort: 9090 },
                  ],
                  env: [{ name: 'SANDBOX_NAME', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } }],
                },
              ],
              nodeSelector: { 'kubernetes.io/hostname': vkNode },
            },
          },
        }),
        poolManifest(ns, 'pool', 'tpl', 2),
      );
      await waitPoolReady(ns, 'pool', 2, 300_000);
    },
    { timeout: BUILD_TIMEOUT_MS + 15 * 60_000 },
  );

  after(async () => {
    await env?.stop();
    await node?.stop();
    client?.close();
  });

  /** The environment the SDK programs get: the cluster's kubeconfig, the pool, and kubectl on PATH (Python's tunnel). */
  function sdkEnv(): NodeJS.ProcessEnv {
    return {
      ...process.env,
      KUBECONFIG_PATH: cluster.kubeconfigPath,
      NS: env!.ns,
      POOL: 'pool',
      PATH: `${dirname(cluster.binaries.kubectl ?? 'kubectl')}:${process.env.PATH ?? ''}`,
    };
  }

  const runSdk = (file: string, args: string[]) => runSdkWith(file, args, sdkEnv());

  it(`Python k8s-agent-sandbox[grpc]==${SDK_VERSION}: claim from a warm pool, commands over gRPC, files over REST`, async () => {
    const { out, msg } = await runSdk(python, ['-c', SCRIPT]);
    assert.deepEqual(out.echo, [0, 'hello world\n', ''], msg);
    assert.equal(out.exit3, 3, msg);
    assert.deepEqual(out.envcwd, [0, 'bonjour\n/workspace/src\nhi from python\n'], msg);
    assert.equal(out.root, '/workspace\n0\n', msg);
    assert.equal(out.read, 'hi from python\n', msg);
    assert.deepEqual(out.readbin, [0, 1, 2, 255], msg);
    assert.deepEqual(
      out.list,
      [
        ['b.bin', 'file', 4, '0644'],
        ['hello.txt', 'file', 15, '0644'],
      ],
      msg,
    );
    assert.deepEqual(out.exists, [true, false], msg);
    assert.equal(out.delete_nonrecursive, 409, msg);
    assert.equal(out.after_delete, false, msg);
    assert.match(String(out.escape), /PERMISSION_DENIED/, msg);
  });

  it('Go sigs.k8s.io/agent-sandbox v1.0.1 (RuntimeSandboxd): claim, Run over gRPC, files over REST', async () => {
    const { out, msg } = await runSdk(goSdk, []);
    assert.equal(out.error, undefined, msg);
    assert.deepEqual(out.echo, [0, 'hello world\n', ''], msg);
    assert.equal(out.write, undefined, msg);
    assert.equal(out.read, 'hi from go\n', msg);
    assert.deepEqual(out.list, [['hello.txt', 'file', 11, '0644']], msg);
    assert.deepEqual(out.exists, [true, false, '<nil>', '<nil>'], msg);
    assert.equal(out.delete, undefined, msg);
    assert.deepEqual(out.after_delete, [false, '<nil>'], msg);
    assert.equal(out.close, undefined, msg);
  });
});
