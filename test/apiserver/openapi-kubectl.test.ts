/**
 * Discovery and OpenAPI against the real kubectl 1.36 and the real kube-aggregator code, before sandbox-apiserver
 * exists: a node:http stand-in serves our handlers, and test/apiserver/aggregator-shim (Go, built against the
 * same Kubernetes modules as the cluster binaries) does what the aggregator does with them: discovery merge
 * (aggregated, and the legacy fallback), the v2 filter/merge into Kubernetes' own spec and its gnostic protobuf
 * conversion, the v3 root merge and proxying. kubectl then explains Sandboxes (v3) and validates them client-side
 * on `kubectl create` (v2), as it will against the real cluster.
 */
import assert from 'node:assert/strict';
import { execFile, spawn, spawnSync, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { copyFile, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { after, before, describe, it } from 'node:test';
import { KUBERNETES_VERSION, obtain, readClusterEnvironment } from '../../src/cluster/index.js';
import { createDiscoveryHandler } from '../../src/apiserver/discovery.js';
import { createOpenApiHandler } from '../../src/apiserver/openapi.js';
import { sandboxesDescriptor } from './descriptors.js';

const env = readClusterEnvironment();
// The cluster binaries' Go module (src/cluster/binaries.ts): its go.mod/go.sum pin every Kubernetes module.
const kubeBuildDir = join(env.cacheDir, 'build', `kubernetes-${KUBERNETES_VERSION}`);
const go = spawnSync('go', ['env', 'GOMODCACHE'], { encoding: 'utf8' });
const skip =
  go.status !== 0
    ? 'Go is not installed (the shim is built with it)'
    : !existsSync(join(kubeBuildDir, 'go.sum'))
      ? `no Kubernetes build module at ${kubeBuildDir} (binaries not built from source here)`
      : false;

interface ShimReport {
  listen: string;
  freshness: string;
  resources: string[];
  v2Status: number;
  v2RevalidateStatus: number;
  v2Renamed: string[];
  v2ProtobufBytes: number;
  v3Paths: string[];
  errors: string[];
}

function run(file: string, args: string[], input?: string): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    const child = execFile(file, args, { timeout: 60_000, maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === 'number' ? err.code : 1) : 0;
      resolve({ code, out: `${stdout}${stderr}` });
    });
    if (input !== undefined) child.stdin?.end(input);
  });
}

function startShim(
  shim: string,
  args: string[],
): Promise<{ child: ChildProcessWithoutNullStreams; report: ShimReport }> {
  const child = spawn(shim, args, { stdio: ['pipe', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-4000)));
  return new Promise((resolve, reject) => {
    const lines = createInterface({ input: child.stdout });
    lines.once('line', (line) => resolve({ child, report: JSON.parse(line) as ShimReport }));
    child.once('exit', (code) => reject(new Error(`aggregator-shim exited ${code}: ${stderr}`)));
  });
}

function sandbox(): Record<string, unknown> {
  return {
    apiVersion: 'agents.x-k8s.io/v1beta1',
    kind: 'Sandbox',
    metadata: {
      name: 'demo',
      labels: { app: 'demo' },
      creationTimestamp: null,
      ownerReferences: [{ apiVersion: 'v1', kind: 'ConfigMap', name: 'c', uid: '1234', controller: true }],
    },
    spec: {
      operatingMode: 'Running',
      shutdownTime: '2030-01-01T00:00:00Z',
      podTemplate: {
        metadata: { labels: { a: 'b' } },
        spec: {
          containers: [
            {
              name: 'main',
              image: 'busybox',
              ports: [{ containerPort: 8080, name: 'http' }],
              // Quantities and int-or-string ports, in both of their forms.
              resources: { limits: { cpu: 1, memory: '1Gi' }, requests: { cpu: '500m' } },
              readinessProbe: { httpGet: { port: 'http', path: '/' } },
              livenessProbe: { tcpSocket: { port: 8080 } },
            },
          ],
        },
      },
      volumeClaimTemplates: [
        {
          metadata: { name: 'data' },
          spec: { accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '1Gi' } } },
        },
      ],
    },
  };
}

describe('discovery and OpenAPI through kube-aggregator code, read by kubectl 1.36', { skip }, () => {
  let dir: string;
  let backend: Server;
  let backendUrl: string;
  let shim: string;
  let kubectl: string;
  const children: ChildProcessWithoutNullStreams[] = [];

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sbx-openapi-kubectl-'));
    const descriptors = [sandboxesDescriptor()];
    const discovery = createDiscoveryHandler(descriptors);
    const openapi = createOpenApiHandler(descriptors);
    backend = createServer((req, res) => {
      const r = { url: req.url ?? '/', accept: req.headers.accept, ifNoneMatch: req.headers['if-none-match'] };
      const out = discovery(r) ?? openapi(r) ?? { status: 404, headers: {}, body: '' };
      res.writeHead(out.status, out.headers).end(out.body);
    });
    await new Promise<void>((resolve) => backend.listen(0, '127.0.0.1', resolve));
    backendUrl = `http://127.0.0.1:${(backend.address() as AddressInfo).port}`;

    kubectl = (await obtain('kubernetes', { cacheDir: env.cacheDir, binDir: env.binDir })).kubectl!;
    for (const f of ['go.mod', 'go.sum']) await copyFile(join(kubeBuildDir, f), join(dir, f));
    await copyFile(new URL('./aggregator-shim/main.go', import.meta.url), join(dir, 'main.go'));
    shim = join(dir, 'aggregator-shim');
    const built = spawnSync('go', ['build', '-trimpath', '-o', shim, '.'], {
      cwd: dir,
      encoding: 'utf8',
      // Offline: every module is in the cache since the cluster binaries were built.
      env: { ...process.env, GOFLAGS: '-mod=mod', GOPROXY: 'off', CGO_ENABLED: '0' },
    });
    assert.equal(built.status, 0, `go build aggregator-shim: ${built.stderr}`);
  });

  after(async () => {
    for (const c of children) c.stdin.end();
    await new Promise((resolve) => backend?.close(resolve));
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const kubeSwagger = () =>
    join(go.stdout.trim(), `k8s.io/kubernetes@${KUBERNETES_VERSION}`, 'api/openapi-spec/swagger.json');

  async function shimFor(...extra: string[]): Promise<ShimReport> {
    const { child, report } = await startShim(shim, ['-backend', backendUrl, '-kube-swagger', kubeSwagger(), ...extra]);
    children.push(child);
    assert.deepEqual(report.errors, []);
    return report;
  }

  it('the aggregator takes our aggregated discovery, and the legacy documents when it falls back', async () => {
    for (const mode of [[], ['-legacy-discovery']]) {
      const report = await shimFor(...mode);
      assert.equal(report.freshness, 'Current', mode.join(' '));
      assert.deepEqual(report.resources.sort(), ['sandboxes', 'sandboxes/fork', 'sandboxes/pause']);
    }
  });

  it('the aggregator merges our v2 (revalidating by ETag, no definition renamed) and converts it to protobuf', async () => {
    const report = await shimFor();
    assert.equal(report.v2Status, 200);
    assert.equal(report.v2RevalidateStatus, 304);
    // Our meta.k8s.io definitions are Kubernetes' own, so the merge keeps one copy of each.
    assert.deepEqual(report.v2Renamed, []);
    assert.ok(report.v2ProtobufBytes > 0);
    assert.deepEqual(report.v3Paths, ['apis/agents.x-k8s.io/v1beta1']);
  });

  async function kubectlFor(report: ShimReport) {
    const kubeconfig = join(dir, `kubeconfig-${children.length}`);
    await writeFile(
      kubeconfig,
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'Config',
        clusters: [{ name: 'shim', cluster: { server: report.listen } }],
        users: [{ name: 'u', user: {} }],
        contexts: [{ name: 'shim', context: { cluster: 'shim', user: 'u', namespace: 'default' } }],
        'current-context': 'shim',
      }),
    );
    const cache = join(dir, `kube-cache-${children.length}`);
    return (args: string[], input?: string) =>
      run(kubectl, ['--kubeconfig', kubeconfig, '--cache-dir', cache, ...args], input);
  }

  it('kubectl explain reads the v3 document', async () => {
    const k = await kubectlFor(await shimFor());
    const spec = await k(['explain', 'sandbox.spec']);
    assert.equal(spec.code, 0, spec.out);
    assert.match(spec.out, /GROUP:\s+agents\.x-k8s\.io\nKIND:\s+Sandbox\nVERSION:\s+v1beta1/);
    assert.match(spec.out, /podTemplate\s+<Object> -required-/);
    const port = await k(['explain', 'sbx.spec.podTemplate.spec.containers.ports.containerPort']);
    assert.match(port.out, /FIELD: containerPort <integer>/);
    const labels = await k(['explain', 'sandboxes.metadata.labels']);
    assert.match(labels.out, /FIELD: labels <map\[string\]string>/);
  });

  it('kubectl create validates against the v2 schema: valid Sandboxes pass, mistakes are caught', async () => {
    const k = await kubectlFor(await shimFor());
    const create = (obj: unknown) =>
      k(['create', '--dry-run=client', '--validate=strict', '-o', 'name', '-f', '-'], JSON.stringify(obj));
    const valid = await create(sandbox());
    assert.equal(valid.code, 0, valid.out);
    assert.equal(valid.out.trim(), 'sandbox.agents.x-k8s.io/demo');

    const unknown = sandbox() as { spec: { podTemplate: { spec: { containers: Record<string, unknown>[] } } } };
    unknown.spec.podTemplate.spec.containers[0]!.bogusField = 1;
    assert.match((await create(unknown)).out, /unknown field "bogusField"/);

    const badMeta = sandbox() as { metadata: Record<string, unknown> };
    badMeta.metadata.bogusMeta = 1;
    assert.match(
      (await create(badMeta)).out,
      /unknown field "bogusMeta" in io\.k8s\.apimachinery\.pkg\.apis\.meta\.v1\.ObjectMeta/,
    );

    const badType = sandbox() as { spec: Record<string, unknown> };
    badType.spec.podTemplate = 'not an object';
    assert.match(
      (await create(badType)).out,
      /invalid type for io\.x-k8s\.agents\.v1beta1\.Sandbox\.spec\.podTemplate/,
    );

    const missing = sandbox() as { spec: Record<string, unknown> };
    delete missing.spec.podTemplate;
    assert.match((await create(missing)).out, /missing required field "podTemplate"/);
  });
});
