/**
 * The components as the chart deploys them (CRD layout), on a control plane of their own: the chart's CRDs,
 * ServiceAccounts, Roles, bindings and ConfigMaps installed for real; sandbox-operator and sandboxd run as their
 * images run them (the JS built as deploy/images/Dockerfile builds it, the image targets' entrypoints) with the
 * args of their Deployment / DaemonSet (paths and ports mapped to this machine, listed below) and a token of
 * their ServiceAccount instead of the admin certificate. The operator elects a leader on its Lease, manages its
 * webhook certificate (Secret, CRD caBundle) and converts v1alpha1 through the webhook Service; sandboxd
 * registers its virtual-kubelet nodes and NodeInventory; a Sandbox on its vk-cocoon node becomes a microVM
 * that `kubectl exec` reaches. No request is refused on the way.
 *
 * A private control plane because the operator patches the CRDs' conversion config, which the shared one's
 * other tests rely on.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Components, type Component } from '../../src/cli/components.js';
import { issueCert, readClusterEnvironment, startCluster, type ClusterHandle } from '../../src/cluster/index.js';
import { freePort } from '../../src/net/free-port.js';
import { eventually } from '../support/eventually.js';
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

const NS = 'sandbox-system';
const NODE = 'host-a';

describe(
  'sandbox-operator and sandboxd as the chart runs them, on their ServiceAccounts',
  { timeout: 20 * 60_000 },
  () => {
    let cluster: ClusterHandle;
    let dir: string;
    let objects: Obj[];
    let components: Components;
    let operator: Component;
    let operatorMetrics: string;
    let sandboxd: Component;
    let app = '';
    const kubectl = (args: string[], input?: string) => cluster.kubectl(args, input);

    const json = async <T>(args: string[]) => JSON.parse(await kubectl([...args, '-o', 'json'])) as T;

    before(async () => {
      const env = readClusterEnvironment();
      dir = await mkdtemp(join(tmpdir(), 'sbx-components-'));
      cluster = await startCluster({ cacheDir: env.cacheDir, binDir: env.binDir, simulatedNodes: 1 });
      components = new Components(dir);
      app = await buildImageApp(dir);
      objects = await helmTemplate(NS);
      await installChartObjects(kubectl, objects, NS, RBAC_AND_CONFIG);
    });

    after(async () => {
      await components?.stop();
      await cluster?.stop();
      if (dir) await rm(dir, { recursive: true, force: true });
    });

    const tokenFor = (name: string) => serviceAccountConfig(cluster, NS, name, dir);

    it('sandbox-operator: leader, webhook certificate, conversion through the webhook Service', async () => {
      const host = cluster.hostAddress;
      const webhookPort = await freePort(host);
      const metricsPort = await freePort();
      const healthPort = await freePort();
      // No kube-proxy here: the webhook Service's endpoint is this machine, where the operator listens.
      await kubectl(['delete', 'service', '-n', NS, 'sandbox-webhook-service', '--ignore-not-found']);
      await kubectl(
        ['apply', '-f', '-'],
        toYamlStream(serviceToHost(NS, 'sandbox-webhook-service', host, webhookPort)),
      );
      const args = hostArgs(containerOf(objects, 'Deployment', 'sandbox-operator'), {
        override: {
          'webhook-port': String(webhookPort),
          'webhook-cert-dir': join(dir, 'webhook-certs'),
          'metrics-bind-address': `127.0.0.1:${metricsPort}`,
          'health-probe-bind-address': `127.0.0.1:${healthPort}`,
        },
        add: [`--kubeconfig=${await tokenFor('sandbox-operator')}`, `--webhook-host=${host}`],
      });
      operator = launchEntrypoint(components, app, 'operator', args, dir);
      await components.waitReady(operator, `http://127.0.0.1:${healthPort}/readyz`, 120_000);
      operatorMetrics = `http://127.0.0.1:${metricsPort}/metrics`;

      const lease = await json<{ spec: { holderIdentity?: string } }>([
        'get',
        'lease',
        '-n',
        NS,
        'sandbox-operator.agents.x-k8s.io',
      ]);
      assert.ok(lease.spec.holderIdentity, 'the leader Lease is held');
      const secret = await json<{ data: Record<string, string> }>(['get', 'secret', '-n', NS, 'sandbox-webhook-certs']);
      assert.deepEqual(Object.keys(secret.data).sort(), ['ca.crt', 'tls.crt', 'tls.key']);
      const crd = await eventually(
        () =>
          json<{ spec: { conversion: { webhook: { clientConfig: { caBundle?: string } } } } }>([
            'get',
            'crd',
            'sandboxtemplates.extensions.agents.x-k8s.io',
          ]),
        {
          until: (c) => !!c.spec.conversion.webhook.clientConfig.caBundle,
          what: 'the CRD caBundle patched',
          timeoutMs: 30_000,
        },
      );
      assert.equal(crd.spec.conversion.webhook.clientConfig.caBundle, secret.data['ca.crt']);

      await kubectl(['create', 'namespace', 'work']);
      await kubectl(
        ['apply', '-f', '-'],
        JSON.stringify({
          apiVersion: 'extensions.agents.x-k8s.io/v1beta1',
          kind: 'SandboxTemplate',
          metadata: { name: 'tpl', namespace: 'work' },
          spec: { podTemplate: { spec: { containers: [{ name: 'main', image: 'registry.k8s.io/pause:3.10' }] } } },
        }),
      );
      const old = await eventually(
        () =>
          kubectl(['get', 'sandboxtemplates.v1alpha1.extensions.agents.x-k8s.io', '-n', 'work', 'tpl', '-o', 'json']),
        { what: 'the template read as v1alpha1 (converted by the webhook)', timeoutMs: 30_000 },
      );
      assert.equal((JSON.parse(old) as { apiVersion: string }).apiVersion, 'extensions.agents.x-k8s.io/v1alpha1');
    });

    it('sandboxd: virtual-kubelet nodes, node Leases and NodeInventory', async () => {
      const host = cluster.hostAddress;
      const apiPort = await freePort(host);
      const kubeletPort = await freePort(host);
      const tokenFile = join(dir, 'sandboxd.token');
      await writeFile(tokenFile, 'root-token-of-this-test', { mode: 0o600 });
      // The test control plane verifies kubelet serving certificates (--kubelet-certificate-authority): give the
      // virtual kubelet one from its CA instead of the self-signed default.
      const serving = await issueCert(dir, cluster.pki.ca, {
        name: 'kubelet',
        commonName: `system:node:${NODE}`,
        ips: [host],
        usage: 'server',
      });
      const args = hostArgs(containerOf(objects, 'DaemonSet', 'sandboxd'), {
        env: { NODE_NAME: NODE, POD_IP: host },
        override: {
          listen: `${host}:${apiPort}`,
          'advertise-addr': `${host}:${apiPort}`,
          'data-dir': join(dir, 'sandboxd'),
          'token-file': tokenFile,
          kubeconfig: await tokenFor('sandboxd'),
          'kubelet-port': String(kubeletPort),
          'kubelet-client-ca': cluster.pki.ca.cert,
        },
        add: [`--kubelet-tls-cert=${serving.cert}`, `--kubelet-tls-key=${serving.key}`, '--destroy-on-exit=true'],
      });
      sandboxd = launchEntrypoint(
        components,
        app,
        'sandboxd',
        args,
        dir,
        await sandboxdImageEnv(dir, ['sandbox/minimal']),
      );
      await components.waitReady(sandboxd, `http://${host}:${apiPort}/healthz`, 10 * 60_000);
      for (const node of [`${NODE}-vk`, `${NODE}-sandboxd`]) {
        await eventually(
          () => kubectl(['get', 'node', node, '-o', "jsonpath={.status.conditions[?(@.type=='Ready')].status}"]),
          { until: (s) => s === 'True', what: `node ${node} Ready`, timeoutMs: 60_000 },
        );
        await json(['get', 'lease', '-n', 'kube-node-lease', node]);
      }
      await eventually(() => json(['get', 'nodeinventory', NODE]), {
        what: 'NodeInventory published',
        timeoutMs: 60_000,
      });
    });

    it('a Sandbox on the vk-cocoon node runs in a microVM that kubectl exec reaches', async () => {
      await kubectl(
        ['apply', '-f', '-'],
        JSON.stringify({
          apiVersion: 'agents.x-k8s.io/v1beta1',
          kind: 'Sandbox',
          metadata: { name: 'vm', namespace: 'work' },
          spec: {
            podTemplate: {
              metadata: { annotations: { 'sandbox.cocoonstack.io/runtime': 'vk-cocoon' } },
              spec: {
                containers: [{ name: 'main', image: 'sandbox/minimal' }],
                nodeSelector: { 'kubernetes.io/hostname': `${NODE}-vk` },
              },
            },
          },
        }),
      );
      await eventually(
        () =>
          kubectl([
            'get',
            'sandbox',
            '-n',
            'work',
            'vm',
            '-o',
            "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
          ]),
        { until: (s) => s === 'True', what: 'the Sandbox Ready', timeoutMs: 5 * 60_000, intervalMs: 1000 },
      );
      const out = await kubectl(['exec', '-n', 'work', 'vm', '--', 'uname', '-s']);
      assert.equal(out.trim(), 'Linux');
    });

    it('no request of the operator was refused', async () => {
      const text = await (await fetch(operatorMetrics)).text();
      const denied = text
        .split('\n')
        .filter((l) => l.startsWith('rest_client_requests_total{') && l.includes('code="403"'));
      assert.deepEqual(denied, []);
      const logs = await readFile(sandboxd.logPath, 'utf8');
      assert.doesNotMatch(logs, /forbidden|\b403\b/i, 'sandboxd logged no refused request');
    });
  },
);
