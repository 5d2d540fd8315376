import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { ensureComponentImages, type ImageComponent } from '../../src/cluster/component-images.js';
import { readClusterEnvironment, startCluster, type ClusterHandle } from '../../src/cluster/index.js';
import type { NodeImage } from '../../src/cluster/node-images.js';
import { eventually } from '../support/eventually.js';
import { CHART, helmBinary, KUSTOMIZE, runTool } from '../support/deploy.js';

/**
 * The install story, for real: the component images (scripts/build-images.sh, imported into a real node's
 * containerd; no registry) run as Pods on a real kubelet + containerd node of a control plane of their own, installed
 * by the Helm chart (both layouts) and by the kustomize overlay: the operator / sandbox-apiserver Deployments and the
 * sandboxd DaemonSet, whose Pod runs microVMs (TCG here). Then what a user does first: a SandboxClaim (CRD layout) or
 * an aggregated `kubectl create` delivers a VM that runs a command, and a `helm upgrade` rolls without losing it.
 *
 * A file of its own that runs alone: it builds images and runs VMs inside Pods on three control planes in turn, too
 * heavy to share the machine with the timing of other tests.
 */
const NS = 'sandbox-system';
const TEMPLATE = 'sandbox/minimal';
const env = readClusterEnvironment();
let images: Record<ImageComponent, NodeImage>;

/** A control plane with one untainted real node holding the layout's component images. */
async function platform(layout: 'crd' | 'aggregated'): Promise<ClusterHandle> {
  // Each archive is hundreds of MB to import: only the layout's (the operator or sandbox-apiserver, and sandboxd).
  const skip = layout === 'crd' ? 'apiserver' : 'operator';
  const cluster = await startCluster({
    cacheDir: env.cacheDir,
    binDir: env.binDir,
    simulatedNodes: 0,
    realNodes: 1,
    // sandboxd's virtual kubelet in a Pod serves a self-signed certificate (its address is the Pod's), as a kubelet
    // without serverTLSBootstrap does: exec and logs through it need a control plane that does not pin kubelet
    // certificates to the cluster CA, which is kubeadm's default (docs/real-nodes.md "The chart on real nodes").
    verifyKubeletCerts: false,
    realNodeImages: Object.entries(images).flatMap(([component, image]) => (component === skip ? [] : [image])),
    progress: (l) => process.stderr.write(`${l}\n`),
  });
  await cluster.kubectl(['create', 'namespace', NS]);
  await cluster.kubectl([
    'create',
    'secret',
    'generic',
    'sandboxd-token',
    '-n',
    NS,
    `--from-literal=token=${randomBytes(24).toString('base64url')}`,
  ]);
  return cluster;
}

async function helm(cluster: ClusterHandle, args: string[]): Promise<string> {
  const res = await runTool(await helmBinary(), [`--kubeconfig=${cluster.kubeconfigPath}`, ...args]);
  assert.ok(res.ok, `helm ${args.join(' ')}: ${res.stderr}`);
  return res.stdout;
}

/** The chart's values for this machine: one replica each, small requests, sandboxd's data under the cluster's dir. */
function values(cluster: ClusterHandle, layout: 'crd' | 'aggregated', extra: string[] = []): string[] {
  return [
    `--set=layout=${layout}`,
    '--set=operator.replicas=1',
    '--set=apiserver.replicas=1',
    `--set=sandboxd.dataHostPath=${cluster.dataDir}/sandboxd-data`,
    '--set=sandboxd.resources.requests.memory=256Mi',
    `--set-json=sandboxd.pools=${JSON.stringify(`${TEMPLATE}=1`)}`,
    ...extra,
  ];
}

const json = async <T>(cluster: ClusterHandle, args: string[]) =>
  JSON.parse(await cluster.kubectl([...args, '-o', 'json'])) as T;

interface PodList {
  items: Array<{
    metadata: { name: string; uid: string; labels?: Record<string, string> };
    spec: { nodeName?: string };
    status: { phase?: string; conditions?: Array<{ type: string; status: string }> };
  }>;
}

/** Every Pod of the release Running and Ready on the real node. */
async function releasePodsReady(cluster: ClusterHandle, names: string[]): Promise<PodList['items']> {
  return eventually(
    async () => {
      const pods = (await json<PodList>(cluster, ['get', 'pods', '-n', NS])).items;
      for (const name of names) {
        const pod = pods.find((p) => p.metadata.labels?.['app.kubernetes.io/name'] === name);
        assert.ok(pod, `a ${name} Pod exists (pods: ${pods.map((p) => p.metadata.name).join(', ')})`);
        assert.equal(pod.spec.nodeName, 'worker-0', `${name} runs on the real node`);
        const ready = pod.status.conditions?.find((c) => c.type === 'Ready')?.status;
        assert.equal(ready, 'True', `${pod.metadata.name} is Ready (phase ${pod.status.phase})`);
      }
      return pods;
    },
    { timeoutMs: 240_000, intervalMs: 1000, what: `${names.join(', ')} Pods Ready` },
  );
}

/** The CRD layout's first steps: a template, a warm pool of one VM, a claim; its Pod runs a command in the VM. */
async function claimRunsCommand(cluster: ClusterHandle, ns: string): Promise<string> {
  await cluster.kubectl(['create', 'namespace', ns]);
  const manifest = [
    { kind: 'SandboxTemplate', metadata: { name: 'vm' }, spec: vmTemplate() },
    { kind: 'SandboxWarmPool', metadata: { name: 'pool' }, spec: { replicas: 1, sandboxTemplateRef: { name: 'vm' } } },
    { kind: 'SandboxClaim', metadata: { name: 'mine' }, spec: { warmPoolRef: { name: 'pool' } } },
  ].map((o) => JSON.stringify({ apiVersion: 'extensions.agents.x-k8s.io/v1beta1', ...o }));
  await cluster.kubectl(['apply', '-n', ns, '-f', '-'], manifest.join('\n'));
  await cluster.kubectl(['wait', '-n', ns, '--for=condition=Ready', 'sandboxclaim/mine', '--timeout=240s']);
  const claim = await json<{ status: { sandbox?: { name?: string } } }>(cluster, [
    'get',
    '-n',
    ns,
    'sandboxclaim/mine',
  ]);
  const sandbox = claim.status.sandbox?.name;
  assert.ok(sandbox, 'the claim names its sandbox');
  return sandbox;
}

const vmTemplate = () => ({
  networkPolicyManagement: 'Unmanaged',
  podTemplate: {
    metadata: { annotations: { 'sandbox.cocoonstack.io/runtime': 'vk-cocoon' } },
    spec: { containers: [{ name: 'sandbox', image: TEMPLATE }] },
  },
});

/** `kubectl exec` into a Pod on sandboxd's virtual kubelet (kube-apiserver → the sandboxd Pod → the VM's agent). */
async function execInVm(cluster: ClusterHandle, ns: string, pod: string, marker: string): Promise<void> {
  const out = await eventually(() => cluster.kubectl(['exec', '-n', ns, pod, '--', 'sh', '-c', `echo ${marker}`]), {
    timeoutMs: 60_000,
    what: `kubectl exec into ${pod}`,
  });
  assert.equal(out.trim(), marker);
}

describe('the Helm chart and the kustomize overlay, installed on a real node', () => {
  before(async () => {
    images = await ensureComponentImages({
      cacheDir: env.cacheDir,
      progress: (l) => process.stderr.write(`${l}\n`),
    });
  });

  describe('crd layout, by helm', () => {
    let cluster: ClusterHandle;
    before(async () => {
      cluster = await platform('crd');
    });
    after(async () => cluster?.stop());

    it('installs: the operator and sandboxd run as Pods, sandboxd registers its virtual nodes', async () => {
      await helm(cluster, ['install', 'sbx', CHART, '-n', NS, ...values(cluster, 'crd'), '--wait', '--timeout=5m']);
      await releasePodsReady(cluster, ['sandbox-operator', 'sandboxd']);
      const nodes = await json<{ items: Array<{ metadata: { name: string } }> }>(cluster, ['get', 'nodes']);
      const names = nodes.items.map((n) => n.metadata.name).sort();
      assert.deepEqual(names, ['worker-0', 'worker-0-sandboxd', 'worker-0-vk']);
    });

    it('a SandboxClaim delivers a microVM that runs a command; helm upgrade rolls the operator and the claim keeps its VM', async () => {
      const ns = 'demo';
      const sandbox = await claimRunsCommand(cluster, ns);
      await execInVm(cluster, ns, sandbox, 'from-the-claimed-vm');
      const before = await json<PodList>(cluster, [
        'get',
        'pods',
        '-n',
        NS,
        '-l',
        'app.kubernetes.io/name=sandbox-operator',
      ]);
      const podUid = (await json<{ metadata: { uid: string } }>(cluster, ['get', 'pod', '-n', ns, sandbox])).metadata
        .uid;

      await helm(cluster, [
        'upgrade',
        'sbx',
        CHART,
        '-n',
        NS,
        ...values(cluster, 'crd', ['--set=operator.logLevel=debug']),
        '--wait',
        '--timeout=5m',
      ]);
      // The old Pod may still be terminating when helm's --wait sees the new one Ready.
      await eventually(
        async () => {
          const now = await json<PodList>(cluster, [
            'get',
            'pods',
            '-n',
            NS,
            '-l',
            'app.kubernetes.io/name=sandbox-operator',
          ]);
          assert.ok(now.items.length > 0, 'an operator Pod exists');
          for (const p of now.items) {
            assert.ok(!before.items.some((b) => b.metadata.uid === p.metadata.uid), `${p.metadata.name} is a new Pod`);
            assert.equal(
              p.status.conditions?.find((c) => c.type === 'Ready')?.status,
              'True',
              `${p.metadata.name} Ready`,
            );
          }
        },
        { timeoutMs: 180_000, intervalMs: 1000, what: 'the operator Pod replaced' },
      );
      const deployment = await json<{ spec: { template: { spec: { containers: Array<{ args: string[] }> } } } }>(
        cluster,
        ['get', 'deployment', '-n', NS, 'sandbox-operator'],
      );
      const args = deployment.spec.template.spec.containers[0]!.args;
      assert.ok(args.includes('--zap-log-level=debug'), `the new value reached the operator: ${args.join(' ')}`);
      // The claim still names the same sandbox, whose Pod (and VM) is the one it had.
      const claim = await json<{ status: { sandbox?: { name?: string } } }>(cluster, [
        'get',
        '-n',
        ns,
        'sandboxclaim/mine',
      ]);
      assert.equal(claim.status.sandbox?.name, sandbox);
      const podAfter = await json<{ metadata: { uid: string } }>(cluster, ['get', 'pod', '-n', ns, sandbox]);
      assert.equal(podAfter.metadata.uid, podUid, 'the sandbox Pod was not replaced');
      await execInVm(cluster, ns, sandbox, 'still-there-after-upgrade');
    });

    it('helm uninstall removes the release: no Pod of it is left', async () => {
      // The claim's Sandbox and Pod go first, while the operator and sandboxd that finalize them still run.
      await cluster.kubectl(['delete', 'namespace', 'demo', '--wait=false']);
      await eventually(
        async () => {
          const left = await cluster.kubectl(['get', 'namespace', 'demo', '--ignore-not-found', '-o', 'name']);
          assert.equal(left.trim(), '', 'namespace demo is gone');
        },
        { timeoutMs: 240_000, intervalMs: 2000, what: 'the demo namespace deleted' },
      );
      await helm(cluster, ['uninstall', 'sbx', '-n', NS, '--wait', '--timeout=3m']);
      await eventually(
        async () => {
          const pods = (await json<PodList>(cluster, ['get', 'pods', '-n', NS])).items;
          assert.deepEqual(
            pods.map((p) => p.metadata.name),
            [],
          );
        },
        { timeoutMs: 120_000, what: 'the release Pods gone' },
      );
    });
  });

  describe('aggregated layout, by helm', () => {
    let cluster: ClusterHandle;
    before(async () => {
      cluster = await platform('aggregated');
    });
    after(async () => cluster?.stop());

    it('installs: sandbox-apiserver and sandboxd run as Pods and the APIService becomes Available', async () => {
      await helm(cluster, [
        'install',
        'sbx',
        CHART,
        '-n',
        NS,
        ...values(cluster, 'aggregated'),
        '--wait',
        '--timeout=5m',
      ]);
      await releasePodsReady(cluster, ['sandbox-apiserver', 'sandboxd']);
      await cluster.kubectl([
        'wait',
        '--for=condition=Available',
        'apiservice/v1beta1.agents.x-k8s.io',
        '--timeout=180s',
      ]);
    });

    it('kubectl create of a Sandbox delivers a microVM that runs a command', async () => {
      await cluster.kubectl(['create', 'namespace', 'demo']);
      const sandbox = {
        apiVersion: 'agents.x-k8s.io/v1beta1',
        kind: 'Sandbox',
        metadata: { name: 'first', namespace: 'demo' },
        spec: { podTemplate: { spec: { containers: [{ name: 'main', image: TEMPLATE }] } } },
      };
      await eventually(() => cluster.kubectl(['create', '-f', '-'], JSON.stringify(sandbox)), {
        timeoutMs: 180_000,
        intervalMs: 2000,
        what: 'a create served (the pool fills once sandboxd has made its template)',
      });
      const out = JSON.parse(
        await cluster.kubectl(
          ['create', '--raw', '/apis/agents.x-k8s.io/v1beta1/namespaces/demo/sandboxes/first/exec', '-f', '-'],
          JSON.stringify({
            apiVersion: 'agents.x-k8s.io/v1beta1',
            kind: 'SandboxExecOptions',
            command: ['sh', '-c', 'echo from-the-aggregated-vm'],
          }),
        ),
      ) as { exitCode: number; stdout: string };
      assert.equal(out.exitCode, 0);
      assert.equal(out.stdout.trim(), 'from-the-aggregated-vm');
      const got = await json<{ status: { nodeName?: string } }>(cluster, ['get', 'sandbox', '-n', 'demo', 'first']);
      assert.equal(got.status.nodeName, 'worker-0', "the sandbox is on the sandboxd Pod's node");
    });
  });

  describe('crd layout, by kubectl apply -k', () => {
    let cluster: ClusterHandle;
    before(async () => {
      cluster = await platform('crd');
    });
    after(async () => cluster?.stop());

    it('the overlay runs the same Pods, and a claim runs a command in its VM', async () => {
      // The overlay's defaults are the chart's: sandboxd's data under /var/lib/sandboxd is this machine's, so point
      // it at the cluster's dir with a patch, as a user would for their nodes.
      const overlay = await kustomization(cluster);
      await cluster.kubectl(['apply', '--server-side', '-k', overlay]);
      await releasePodsReady(cluster, ['sandbox-operator', 'sandboxd']);
      const sandbox = await claimRunsCommand(cluster, 'demo');
      await execInVm(cluster, 'demo', sandbox, 'from-the-kustomize-vm');
    });
  });
});

/** A kustomization over deploy/kustomize/overlays/crd that moves sandboxd's hostPath and pools for this machine. */
async function kustomization(cluster: ClusterHandle): Promise<string> {
  const { mkdir, writeFile } = await import('node:fs/promises');
  const { join, relative } = await import('node:path');
  const dir = join(cluster.dataDir, 'kustomize');
  await mkdir(dir, { recursive: true });
  const patch = [
    { op: 'replace', path: '/spec/template/spec/volumes/0/hostPath/path', value: `${cluster.dataDir}/sandboxd-data` },
  ];
  await writeFile(
    join(dir, 'kustomization.yaml'),
    JSON.stringify({
      apiVersion: 'kustomize.config.k8s.io/v1beta1',
      kind: 'Kustomization',
      resources: [relative(dir, join(KUSTOMIZE, 'overlays', 'crd'))],
      patches: [{ target: { kind: 'DaemonSet', name: 'sandboxd' }, patch: JSON.stringify(patch) }],
    }),
  );
  return dir;
}
