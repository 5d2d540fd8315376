/**
 * The aggregated layout as the chart installs it (cert-manager off: the chart's generated CA and serving
 * certificate), on a control plane of its own: the chart's CRDs (no Sandbox CRD), ServiceAccounts, roles,
 * bindings, the certificate Secret and the APIService with its caBundle installed for real; sandboxd and
 * sandbox-apiserver run as their images run them with the args of their DaemonSet / Deployment (paths and ports
 * mapped to this machine) on tokens of their ServiceAccounts. The APIService becomes Available with the chart's
 * certificate, a Sandbox is created, read, listed and deleted through the aggregator, the warm-pool driver takes
 * its Lease and writes a pool's status, and no request of sandbox-apiserver is refused.
 */
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { request as httpsRequest } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Components } from '../../src/cli/components.js';
import { APISERVICE_NAME } from '../../src/cluster/aggregated.js';
import { readClusterEnvironment, startCluster, type ClusterHandle } from '../../src/cluster/index.js';
import { freePort } from '../../src/net/free-port.js';
import {
  buildImageApp,
  containerOf,
  helmTemplate,
  hostArgs,
  installChartObjects,
  launchEntrypoint,
  RBAC_AND_CONFIG,
  sandboxdImageEnv,
  serviceAccountConfig,
  serviceToHost,
  toYamlStream,
  type Obj,
} from '../support/deploy.js';
import { eventually } from '../support/eventually.js';
import { refusedRequests } from '../support/promql.js';

const NS = 'sandbox-system';
const TEMPLATE = 'sandbox/minimal';

describe('sandbox-apiserver and sandboxd as the chart runs them (aggregated layout)', { timeout: 20 * 60_000 }, () => {
  let cluster: ClusterHandle;
  let dir: string;
  let app: string;
  let objects: Obj[];
  let components: Components;
  let apiserverAddress = '';
  const kubectl = (args: string[], input?: string) => cluster.kubectl(args, input);
  const tokenFile = () => join(dir, 'sandboxd.token');

  /** A GET of sandbox-apiserver, verifying its certificate for the Service name the aggregator verifies. */
  async function get(path: string, asAdmin = false): Promise<{ status: number; body: string }> {
    const ca = await readFile(join(dir, 'apiserver-tls', 'ca.crt'));
    const client = asAdmin
      ? { cert: await readFile(cluster.pki.admin.cert), key: await readFile(cluster.pki.admin.key) }
      : {};
    return new Promise((resolve, reject) => {
      const req = httpsRequest(
        `https://${apiserverAddress}${path}`,
        { ca, ...client, servername: `sandbox-apiserver.${NS}.svc`, timeout: 2000 },
        (res) => {
          let body = '';
          res.on('data', (d: Buffer) => (body += d.toString()));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        },
      );
      req.on('timeout', () => req.destroy(new Error('timeout')));
      req.on('error', reject);
      req.end();
    });
  }

  before(async () => {
    const env = readClusterEnvironment();
    dir = await mkdtemp(join(tmpdir(), 'sbx-components-agg-'));
    cluster = await startCluster({ cacheDir: env.cacheDir, binDir: env.binDir, simulatedNodes: 0 });
    components = new Components(dir);
    app = await buildImageApp(dir);
    objects = await helmTemplate(NS, { layout: 'aggregated', 'sandboxd.pools': `${TEMPLATE}=1` });
    const crds = objects.filter((o) => o.kind === 'CustomResourceDefinition');
    assert.ok(
      !crds.some((c) => c.metadata.name === 'sandboxes.agents.x-k8s.io'),
      'no Sandbox CRD: the APIService serves them',
    );
    await installChartObjects(kubectl, objects, NS, [...RBAC_AND_CONFIG, 'Secret']);
    await writeFile(tokenFile(), 'root-token-of-this-test', { mode: 0o600 });
  });

  after(async () => {
    await components?.stop();
    await cluster?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('sandboxd (no virtual kubelets in this layout) publishes its NodeInventory with a warm pool', async () => {
    const host = cluster.hostAddress;
    const port = await freePort(host);
    const args = hostArgs(containerOf(objects, 'DaemonSet', 'sandboxd'), {
      env: { NODE_NAME: 'host-a', POD_IP: host },
      override: {
        listen: `${host}:${port}`,
        'advertise-addr': `${host}:${port}`,
        'data-dir': join(dir, 'sandboxd'),
        'token-file': tokenFile(),
        kubeconfig: await serviceAccountConfig(cluster, NS, 'sandboxd', dir),
      },
      add: ['--destroy-on-exit=true'],
    });
    assert.ok(args.includes('--vk-nodes='), 'the DaemonSet turns the virtual kubelets off');
    const d = launchEntrypoint(components, app, 'sandboxd', args, dir, await sandboxdImageEnv(dir, [TEMPLATE]));
    await components.waitReady(d, `http://${host}:${port}/healthz`, 10 * 60_000);
    await eventually(() => kubectl(['get', 'nodeinventory', 'host-a', '-o', 'json']), {
      what: 'NodeInventory published',
      timeoutMs: 60_000,
    });
  });

  it("sandbox-apiserver with the chart's certificate: the APIService is Available and serves sandboxes", async () => {
    const host = cluster.hostAddress;
    const port = await freePort(host);
    const secret = objects.find((o) => o.kind === 'Secret' && o.metadata.name === 'sandbox-apiserver-tls')!;
    const data = secret['data'] as Record<string, string>;
    const tls = join(dir, 'apiserver-tls');
    await mkdir(tls);
    for (const f of ['tls.crt', 'tls.key', 'ca.crt']) await writeFile(join(tls, f), Buffer.from(data[f]!, 'base64'));
    const args = hostArgs(containerOf(objects, 'Deployment', 'sandbox-apiserver'), {
      override: {
        'secure-port': String(port),
        'tls-cert-file': join(tls, 'tls.crt'),
        'tls-private-key-file': join(tls, 'tls.key'),
        'sandboxd-token-file': tokenFile(),
      },
      add: [
        `--bind-address=${host}`,
        `--kubeconfig=${await serviceAccountConfig(cluster, NS, 'sandbox-apiserver', dir)}`,
      ],
    });
    const s = launchEntrypoint(components, app, 'apiserver', args, dir);
    apiserverAddress = `${host}:${port}`;
    await eventually(
      async () => {
        await components.assertRunning(s);
        return (await get('/readyz').catch(() => ({ status: 0 }))).status;
      },
      { until: (status) => status === 200, what: 'sandbox-apiserver /readyz', timeoutMs: 120_000, intervalMs: 500 },
    );
    const apiService = objects.find((o) => o.kind === 'APIService')!;
    await kubectl(
      ['apply', '-f', '-'],
      toYamlStream([...serviceToHost(NS, 'sandbox-apiserver', host, port), apiService]),
    );
    await eventually(
      () =>
        kubectl([
          'get',
          'apiservice',
          APISERVICE_NAME,
          '-o',
          "jsonpath={.status.conditions[?(@.type=='Available')].status}",
        ]),
      { until: (v) => v === 'True', what: 'the APIService Available', timeoutMs: 60_000 },
    );
    await kubectl(['create', 'namespace', 'work']);
    const sandbox = {
      apiVersion: 'agents.x-k8s.io/v1beta1',
      kind: 'Sandbox',
      metadata: { name: 's1', namespace: 'work' },
      spec: { podTemplate: { spec: { containers: [{ name: 'main', image: TEMPLATE }] } } },
    };
    await eventually(() => kubectl(['create', '-f', '-'], JSON.stringify(sandbox)), {
      what: 'a Sandbox created (a warm VM claimed)',
      timeoutMs: 5 * 60_000,
      intervalMs: 2000,
    });
    assert.match(await kubectl(['get', '-n', 'work', 'sandboxes', '-o', 'name']), /s1/);
    await kubectl(['delete', '-n', 'work', 'sandbox', 's1']);
  });

  it("the warm-pool driver, on the chart's RBAC, takes its Lease, marks a SandboxWarmPool and writes its status", async () => {
    await kubectl(
      ['apply', '-n', 'work', '-f', '-'],
      toYamlStream([
        {
          apiVersion: 'extensions.agents.x-k8s.io/v1beta1',
          kind: 'SandboxTemplate',
          metadata: { name: 'tpl' },
          spec: { podTemplate: { spec: { containers: [{ name: 'main', image: TEMPLATE }] } } },
        },
        {
          apiVersion: 'extensions.agents.x-k8s.io/v1beta1',
          kind: 'SandboxWarmPool',
          metadata: { name: 'pool' },
          spec: { replicas: 1, sandboxTemplateRef: { name: 'tpl' } },
        },
      ]),
    );
    const pool = await eventually(
      async () =>
        JSON.parse(await kubectl(['get', '-n', 'work', 'sandboxwarmpool', 'pool', '-o', 'json'])) as {
          metadata: { generation?: number; annotations?: Record<string, string> };
          status?: { replicas?: number; observedGeneration?: number };
        },
      { until: (p) => p.status?.replicas === 1, what: 'the pool status written by the driver', timeoutMs: 60_000 },
    );
    assert.equal(pool.metadata.annotations?.['sandbox.cocoonstack.io/served-by'], 'sandbox-apiserver');
    assert.equal(pool.status?.observedGeneration, pool.metadata.generation);
    assert.match(
      await kubectl([
        'get',
        'lease',
        '-n',
        NS,
        'sandbox-apiserver-warm-pool-driver',
        '-o',
        'jsonpath={.spec.holderIdentity}',
      ]),
      /./,
      'the driver holds its leader Lease',
    );
    await kubectl(['delete', '-n', 'work', 'sandboxwarmpool', 'pool']);
  });

  it('no request of sandbox-apiserver was refused', async () => {
    const { status, body: text } = await get('/metrics', true);
    assert.equal(status, 200);
    assert.match(text, /^rest_client_requests_total\{/m);
    assert.deepEqual(refusedRequests(text), []);
  });
});
