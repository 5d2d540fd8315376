/**
 * The generated CRDs and the conversion webhook on the real control plane (src/cluster): every kind created
 * through one version and read through the other with kubectl, printer columns, explain, the scale subresource,
 * the volumeClaimTemplates CEL rule and schema errors that name the field.
 *
 * The webhook runs in this process with managed certificates (Secret in the test namespace) and is reached by
 * `clientConfig.url`; the CRDs' original conversion config is put back afterwards.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { ALL_RESOURCES, crdNameOf, CONVERTIBLE_RESOURCES, deprecationWarningOf } from '../../src/api/index.js';
import { KubeClient } from '../../src/kube/index.js';
import { silentLogger } from '../../src/log/logger.js';
import {
  KubeWebhookCertStore,
  startWebhook,
  type WebhookHandle,
  type WebhookOptions,
} from '../../src/operator/webhook/index.js';
import { createTestNamespace, getTestCluster, type TestCluster } from '../support/cluster.js';
import { eventually } from '../support/eventually.js';

const run = promisify(execFile);
type Obj = Record<string, unknown>;

const pod = { spec: { containers: [{ name: 'main', image: 'registry.k8s.io/pause:3.10' }] } };
const vct = (size: string) => [
  { metadata: { name: 'data' }, spec: { accessModes: ['ReadWriteOnce'], resources: { requests: { storage: size } } } },
];

describe('agent-sandbox CRDs + conversion webhook on the real control plane', () => {
  let cluster: TestCluster;
  let ns: { name: string; cleanup(): Promise<void> };
  let webhook: WebhookHandle | undefined;
  let client: KubeClient | undefined;
  let certDir: string;
  const originalConversion = new Map<string, Obj>();

  /** kubectl with stderr (deprecation warnings) and failures returned, not thrown. */
  const kubectl = async (args: string[], input?: string) => {
    const child = run(
      cluster.binaries.kubectl ?? 'kubectl',
      [`--kubeconfig=${cluster.kubeconfigPath}`, '-n', ns.name, ...args],
      {
        timeout: 60_000,
        maxBuffer: 64 << 20,
      },
    );
    if (input !== undefined) child.child.stdin?.end(input);
    try {
      const { stdout, stderr } = await child;
      return { ok: true, stdout, stderr };
    } catch (err) {
      const e = err as { stdout?: string; stderr?: string; message: string };
      return { ok: false, stdout: e.stdout ?? '', stderr: e.stderr ?? e.message };
    }
  };
  const must = async (args: string[], input?: string) => {
    const r = await kubectl(args, input);
    assert.ok(r.ok, `kubectl ${args.join(' ')}: ${r.stderr}`);
    return r;
  };
  const apply = (obj: Obj) => must(['apply', '-f', '-'], JSON.stringify(obj));
  const get = async (resource: string, name: string) =>
    JSON.parse((await must(['get', resource, name, '-o', 'json'])).stdout) as Obj;
  const spec = (o: Obj) => o['spec'] as Obj;
  const annotations = (o: Obj) => ((o['metadata'] as Obj)['annotations'] ?? {}) as Record<string, string>;
  const webhookOptions = (): WebhookOptions => {
    const host = cluster.hostAddress.includes(':') ? `[${cluster.hostAddress}]` : cluster.hostAddress;
    return {
      port: 0,
      host: cluster.hostAddress,
      certDir,
      manageCerts: true,
      serviceName: 'sandbox-webhook-service',
      namespace: ns.name,
      clusterDomain: cluster.clusterDomain,
      webhookUrl: (port) => `https://${host}:${port}/convert`,
      extensions: true,
      store: new KubeWebhookCertStore(client!),
      logger: silentLogger,
    };
  };

  before(async () => {
    cluster = await getTestCluster();
    ns = await createTestNamespace('conv');
    for (const r of CONVERTIBLE_RESOURCES) {
      const crd = JSON.parse(await cluster.kubectl(['get', 'crd', crdNameOf(r), '-o', 'json'])) as Obj;
      originalConversion.set(crdNameOf(r), (crd['spec'] as Obj)['conversion'] as Obj);
    }
    certDir = await mkdtemp(join(tmpdir(), 'sbx-webhook-'));
    client = await KubeClient.fromKubeconfig(cluster.kubeconfigPath);
    webhook = await startWebhook(webhookOptions());
    assert.deepEqual([...webhook.patchedCrds].sort(), CONVERTIBLE_RESOURCES.map(crdNameOf).sort());
    // The apiserver picks the new conversion config up asynchronously.
    await eventually(
      async () => {
        await must(['get', 'sandboxes.v1alpha1.agents.x-k8s.io']);
        await must(['get', 'sandboxclaims.v1alpha1.extensions.agents.x-k8s.io']);
      },
      { what: 'v1alpha1 reads through the webhook', timeoutMs: 60_000 },
    );
  });

  after(async () => {
    if (cluster) {
      for (const [name, conversion] of originalConversion) {
        await cluster.kubectl([
          'patch',
          'crd',
          name,
          '--type=json',
          '-p',
          JSON.stringify([{ op: 'replace', path: '/spec/conversion', value: conversion }]),
        ]);
      }
    }
    await webhook?.close();
    client?.close();
    if (certDir) await rm(certDir, { recursive: true, force: true });
    await ns?.cleanup();
  });

  it('stores the managed certificates in a Secret and trusts them in every CRD', async () => {
    const secret = await get('secret', 'sandbox-webhook-certs');
    assert.deepEqual(Object.keys(secret['data'] as Obj).sort(), ['ca.crt', 'tls.crt', 'tls.key']);
    const crd = JSON.parse(await cluster.kubectl(['get', 'crd', 'sandboxes.agents.x-k8s.io', '-o', 'json'])) as Obj;
    const hook = ((spec(crd)['conversion'] as Obj)['webhook'] as Obj)['clientConfig'] as Obj;
    assert.equal(hook['caBundle'], Buffer.from(webhook!.caPem!).toString('base64'));
    assert.match(String(hook['url']), /\/convert$/);
  });

  it('Sandbox: v1alpha1 replicas 0 reads as v1beta1 Suspended, with the deprecation warning', async () => {
    const r = await apply({
      apiVersion: 'agents.x-k8s.io/v1alpha1',
      kind: 'Sandbox',
      metadata: { name: 'sb-alpha' },
      spec: { podTemplate: pod, replicas: 0 },
    });
    assert.ok(r.stderr.includes(deprecationWarningOf(ALL_RESOURCES[0]!, 'v1alpha1')), r.stderr);
    const hub = await get('sandboxes.v1beta1.agents.x-k8s.io', 'sb-alpha');
    assert.equal(hub['apiVersion'], 'agents.x-k8s.io/v1beta1');
    assert.equal(spec(hub)['operatingMode'], 'Suspended');
    assert.equal(spec(hub)['shutdownPolicy'], 'Retain');
    const view = await get('sandboxes.v1alpha1.agents.x-k8s.io', 'sb-alpha');
    assert.equal(spec(view)['replicas'], 0);
  });

  it('Sandbox: v1beta1 Running reads as v1alpha1 replicas 1; a v1alpha1 no-op write leaves storage untouched', async () => {
    // create, not apply: kubectl replace would rewrite apply's last-applied annotation.
    const created = {
      apiVersion: 'agents.x-k8s.io/v1beta1',
      kind: 'Sandbox',
      metadata: { name: 'sb-beta' },
      spec: { podTemplate: pod },
    };
    await must(['create', '-f', '-'], JSON.stringify(created));
    const before = await get('sandboxes.v1beta1.agents.x-k8s.io', 'sb-beta');
    const view = await get('sandboxes.v1alpha1.agents.x-k8s.io', 'sb-beta');
    assert.equal(spec(view)['replicas'], 1);
    await must(['replace', '-f', '-'], JSON.stringify(view));
    const afterWrite = await get('sandboxes.v1beta1.agents.x-k8s.io', 'sb-beta');
    assert.deepEqual(afterWrite, before, 'a v1alpha1 read-modify-write without changes is a no-op');
  });

  it('SandboxTemplate: volumeClaimTemplatesPolicy through the v1alpha1 annotation, both ways', async () => {
    await apply({
      apiVersion: 'extensions.agents.x-k8s.io/v1alpha1',
      kind: 'SandboxTemplate',
      metadata: {
        name: 'tpl-alpha',
        annotations: { 'api.agents.x-k8s.io/v1beta1-volume-claim-templates-policy': 'Allowed' },
      },
      spec: { podTemplate: pod },
    });
    const hub = await get('sandboxtemplates.v1beta1.extensions.agents.x-k8s.io', 'tpl-alpha');
    assert.equal(spec(hub)['volumeClaimTemplatesPolicy'], 'Allowed');
    assert.equal(spec(hub)['networkPolicyManagement'], 'Managed');
    assert.equal(annotations(hub)['api.agents.x-k8s.io/v1beta1-volume-claim-templates-policy'], undefined);

    await apply({
      apiVersion: 'extensions.agents.x-k8s.io/v1beta1',
      kind: 'SandboxTemplate',
      metadata: { name: 'tpl-beta' },
      spec: { podTemplate: pod, volumeClaimTemplatesPolicy: 'Overrides' },
    });
    const view = await get('sandboxtemplates.v1alpha1.extensions.agents.x-k8s.io', 'tpl-beta');
    assert.equal(annotations(view)['api.agents.x-k8s.io/v1beta1-volume-claim-templates-policy'], 'Overrides');
  });

  it('SandboxWarmPool: both versions, printer columns and kubectl scale', async () => {
    await apply({
      apiVersion: 'extensions.agents.x-k8s.io/v1alpha1',
      kind: 'SandboxWarmPool',
      metadata: { name: 'pool-alpha' },
      spec: { replicas: 2, sandboxTemplateRef: { name: 'tpl-alpha' } },
    });
    assert.equal(spec(await get('sandboxwarmpools.v1beta1.extensions.agents.x-k8s.io', 'pool-alpha'))['replicas'], 2);
    await apply({
      apiVersion: 'extensions.agents.x-k8s.io/v1beta1',
      kind: 'SandboxWarmPool',
      metadata: { name: 'pool-beta' },
      spec: { sandboxTemplateRef: { name: 'tpl-beta' } },
    });
    assert.equal(spec(await get('sandboxwarmpools.v1alpha1.extensions.agents.x-k8s.io', 'pool-beta'))['replicas'], 1);

    await must(['scale', 'sandboxwarmpool/pool-beta', '--replicas=3']);
    assert.equal(spec(await get('sandboxwarmpools', 'pool-beta'))['replicas'], 3);
    assert.equal(spec(await get('sandboxwarmpools.v1alpha1.extensions.agents.x-k8s.io', 'pool-beta'))['replicas'], 3);

    const table = (await must(['get', 'swp'])).stdout;
    assert.match(table.split('\n')[0]!, /^NAME\s+READY\s+DESIRED\s+AGE$/);
    assert.match(table, /\npool-beta\s+3\s+\S+\n/, 'no ready replicas yet, 3 desired');
  });

  it('SandboxClaim: warmpool none goes to the shadow pool and comes back with its template; v1beta1 VCTs survive', async () => {
    await apply({
      apiVersion: 'extensions.agents.x-k8s.io/v1alpha1',
      kind: 'SandboxClaim',
      metadata: { name: 'claim-alpha' },
      spec: { sandboxTemplateRef: { name: 'python' }, warmpool: 'none' },
    });
    const hub = await get('sandboxclaims.v1beta1.extensions.agents.x-k8s.io', 'claim-alpha');
    assert.deepEqual(spec(hub)['warmPoolRef'], { name: 'shadow-pool-python' });
    const view = await get('sandboxclaims.v1alpha1.extensions.agents.x-k8s.io', 'claim-alpha');
    assert.deepEqual(spec(view)['sandboxTemplateRef'], { name: 'python' });
    assert.equal(spec(view)['warmpool'], 'none');

    await apply({
      apiVersion: 'extensions.agents.x-k8s.io/v1beta1',
      kind: 'SandboxClaim',
      metadata: { name: 'claim-beta' },
      spec: { warmPoolRef: { name: 'pool-beta' }, volumeClaimTemplates: vct('1Gi') },
    });
    const betaView = await get('sandboxclaims.v1alpha1.extensions.agents.x-k8s.io', 'claim-beta');
    assert.equal(spec(betaView)['warmpool'], 'pool-beta');
    assert.ok(annotations(betaView)['api.agents.x-k8s.io/v1beta1-sandboxclaim-volume-claim-templates']);
    await must(['replace', '-f', '-'], JSON.stringify(betaView));
    assert.deepEqual(
      spec(await get('sandboxclaims.v1beta1.extensions.agents.x-k8s.io', 'claim-beta'))['volumeClaimTemplates'],
      vct('1Gi'),
    );

    const table = (await must(['get', 'sandboxclaims'])).stdout;
    assert.match(table.split('\n')[0]!, /^NAME\s+READY\s+SANDBOX\s+REASON\s+AGE$/);
  });

  it('kubectl get shows the Sandbox columns and kubectl explain sandbox.spec works', async () => {
    const table = (await must(['get', 'sandboxes'])).stdout;
    assert.match(table.split('\n')[0]!, /^NAME\s+READY\s+REASON\s+AGE$/);
    const explain = (await must(['explain', 'sandbox.spec'])).stdout;
    assert.match(explain, /operatingMode/);
    assert.match(explain, /podTemplate\s+<Object> -required-/);
  });

  it('rejects a change of volumeClaimTemplates with the upstream message', async () => {
    await apply({
      apiVersion: 'agents.x-k8s.io/v1beta1',
      kind: 'Sandbox',
      metadata: { name: 'sb-vct' },
      spec: { podTemplate: pod, volumeClaimTemplates: vct('1Gi') },
    });
    for (const patch of [{ spec: { volumeClaimTemplates: vct('2Gi') } }, { spec: { volumeClaimTemplates: null } }]) {
      const r = await kubectl(['patch', 'sandbox', 'sb-vct', '--type=merge', '-p', JSON.stringify(patch)]);
      assert.equal(r.ok, false);
      assert.match(r.stderr, /volumeClaimTemplates is immutable/);
    }
    await apply({
      apiVersion: 'agents.x-k8s.io/v1beta1',
      kind: 'Sandbox',
      metadata: { name: 'sb-novct' },
      spec: { podTemplate: pod },
    });
    const r = await kubectl([
      'patch',
      'sandbox',
      'sb-novct',
      '--type=merge',
      '-p',
      JSON.stringify({ spec: { volumeClaimTemplates: vct('1Gi') } }),
    ]);
    assert.match(r.stderr, /volumeClaimTemplates is immutable/);
    // Everything else in spec stays mutable.
    await must(['patch', 'sandbox', 'sb-vct', '--type=merge', '-p', '{"spec":{"operatingMode":"Suspended"}}']);
  });

  const invalid: [string, Obj, RegExp][] = [
    [
      'an unknown operatingMode',
      {
        apiVersion: 'agents.x-k8s.io/v1beta1',
        kind: 'Sandbox',
        metadata: { name: 'bad1' },
        spec: { podTemplate: pod, operatingMode: 'Paused' },
      },
      /spec\.operatingMode: Unsupported value: "Paused"/,
    ],
    [
      'v1alpha1 replicas 2',
      {
        apiVersion: 'agents.x-k8s.io/v1alpha1',
        kind: 'Sandbox',
        metadata: { name: 'bad2' },
        spec: { podTemplate: pod, replicas: 2 },
      },
      /spec\.replicas: Invalid value: 2/,
    ],
    [
      'a pod template without containers',
      {
        apiVersion: 'agents.x-k8s.io/v1beta1',
        kind: 'Sandbox',
        metadata: { name: 'bad3' },
        spec: { podTemplate: { spec: {} } },
      },
      /spec\.podTemplate\.spec\.containers: Required value/,
    ],
    [
      'a claim without warmPoolRef',
      { apiVersion: 'extensions.agents.x-k8s.io/v1beta1', kind: 'SandboxClaim', metadata: { name: 'bad4' }, spec: {} },
      /spec\.warmPoolRef: Required value/,
    ],
    [
      'a negative pool size',
      {
        apiVersion: 'extensions.agents.x-k8s.io/v1beta1',
        kind: 'SandboxWarmPool',
        metadata: { name: 'bad5' },
        spec: { replicas: -1, sandboxTemplateRef: { name: 't' } },
      },
      /spec\.replicas: Invalid value: -1/,
    ],
  ];
  for (const [what, obj, message] of invalid) {
    it(`rejects ${what} with a message naming the field`, async () => {
      const r = await kubectl(['create', '-f', '-'], JSON.stringify(obj));
      assert.equal(r.ok, false);
      assert.match(r.stderr, message);
    });
  }

  it('NodeInventory is cluster-scoped with a Node column', async () => {
    const name = `node-${ns.name}`;
    await must(
      ['apply', '-f', '-'],
      JSON.stringify({
        apiVersion: 'extensions.agents.x-k8s.io/v1beta1',
        kind: 'NodeInventory',
        metadata: { name },
        node: name,
        pools: [{ template: 't', warm: 1, target: 2 }],
      }),
    );
    try {
      const table = (await must(['get', 'nodeinventories', name])).stdout;
      assert.match(table, new RegExp(`^NAME\\s+NODE\\s+AGE\\n${name}\\s+${name}\\s+`));
    } finally {
      await must(['delete', 'nodeinventory', name]);
    }
  });

  it('renews a short-lived certificate: the caBundle follows and conversion never fails across the switch', async () => {
    await webhook?.close();
    webhook = undefined;
    // Valid 30 s, renewed when 20 s remain: the first renewal ~10 s after start. Its own Secret, so the
    // year-long certificate of the tests above is not reused.
    webhook = await startWebhook({
      ...webhookOptions(),
      secretName: 'sandbox-webhook-certs-short',
      certValidityMs: 30_000,
      renewBeforeMs: 20_000,
    });
    const firstCa = webhook.caPem!;
    const caBundle = async () => {
      const crd = JSON.parse(await cluster.kubectl(['get', 'crd', 'sandboxes.agents.x-k8s.io', '-o', 'json'])) as Obj;
      const hook = ((spec(crd)['conversion'] as Obj)['webhook'] as Obj)['clientConfig'] as Obj;
      return Buffer.from(String(hook['caBundle']), 'base64').toString();
    };
    assert.equal(await caBundle(), firstCa);
    await apply({
      apiVersion: 'agents.x-k8s.io/v1beta1',
      kind: 'Sandbox',
      metadata: { name: 'sb-rotation' },
      spec: { podTemplate: pod },
    });
    // Read through the webhook without pause until a few seconds after the switch; every read must succeed.
    const failures: string[] = [];
    let reads = 0;
    let switchedAt: number | undefined;
    const deadline = Date.now() + 45_000;
    while (Date.now() < deadline && (switchedAt === undefined || Date.now() - switchedAt < 4_000)) {
      const r = await kubectl(['get', 'sandboxes.v1alpha1.agents.x-k8s.io', 'sb-rotation', '-o', 'json']);
      reads++;
      if (!r.ok) failures.push(r.stderr);
      if (switchedAt === undefined && webhook.caPem !== firstCa) switchedAt = Date.now();
    }
    assert.ok(switchedAt !== undefined, 'the certificate was renewed within 45 s');
    assert.deepEqual(failures, [], `${failures.length} of ${reads} reads failed`);
    // The CRD trusts the new CA (next to the old one while that is valid), and the Secret holds the new bundle.
    assert.ok((await caBundle()).startsWith(webhook.caPem!));
    // Renewals come every ~10 s and the server switches a moment after the Secret is written, so compare once both
    // sides have settled on the same renewal.
    await eventually(
      async () => {
        const secret = await get('secret', 'sandbox-webhook-certs-short');
        return Buffer.from(String((secret['data'] as Obj)['ca.crt']), 'base64').toString() === webhook?.caPem;
      },
      { until: (same) => same, timeoutMs: 10_000, what: 'the Secret and the server on the same CA' },
    );
  });
});
