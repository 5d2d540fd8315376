/**
 * SandboxClaims made through the Kubernetes API in the aggregated layout (docs/aggregated-layout.md "SandboxClaims"):
 * sandbox-apiserver's claim binder binds them by node-local claims on real microVMs — `kubectl wait
 * --for=condition=Ready` works, the Sandbox is served by the aggregated API under the claim's name and runs
 * commands, `kubectl delete` of the claim releases the VM; a pool no node serves, a missing pool, an expiry with
 * shutdownPolicy Delete, and a Sandbox deleted from under its claim (never a second VM) each end as they should.
 */
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { aggregatedNamespace, getAggregated, type AggregatedEnv } from '../support/aggregated.js';
import { claimGatewayFixture, type ClaimObj } from '../support/claim-gateway.js';
import { eventually } from '../support/eventually.js';

const EXT = 'extensions.agents.x-k8s.io/v1beta1';

describe('aggregated layout: SandboxClaims bound by node-local claims (real microVMs)', () => {
  let env: AggregatedEnv;
  let ns: { name: string; cleanup(): Promise<void> };
  before(async () => {
    env = await getAggregated();
    ns = await aggregatedNamespace('claims');
    // SandboxTemplate tpl (the nodes' own pool key) with SandboxWarmPool `pool`, and `unserved` (size xlarge).
    await claimGatewayFixture(env.kubectl, ns.name);
  });
  after(async () => ns?.cleanup());

  const claim = (
    name: string,
    pool: string,
    lifecycle?: Record<string, unknown>,
    extra: Record<string, unknown> = {},
  ) =>
    env.kubectl(
      ['create', '-n', ns.name, '-f', '-'],
      JSON.stringify({
        apiVersion: EXT,
        kind: 'SandboxClaim',
        metadata: { name },
        spec: { warmPoolRef: { name: pool }, ...(lifecycle ? { lifecycle } : {}), ...extra },
      }),
    );
  const getClaim = async (name: string) =>
    JSON.parse(await env.kubectl(['get', '-n', ns.name, 'sandboxclaim', name, '-o', 'json'])) as ClaimObj;
  const getSandbox = async (name: string) =>
    JSON.parse(await env.kubectl(['get', '-n', ns.name, 'sandbox', name, '-o', 'json'])) as {
      metadata: {
        uid: string;
        labels: Record<string, string>;
        annotations: Record<string, string>;
        ownerReferences?: Array<{ kind: string; name: string; uid: string; controller?: boolean }>;
      };
      status: { nodeName: string };
    };
  const sandboxGone = (name: string, what: string) =>
    eventually(() => env.kubectl(['get', '-n', ns.name, 'sandbox', name, '--ignore-not-found', '-o', 'name']), {
      until: (out) => out.trim() === '',
      timeoutMs: 30_000,
      what,
    });
  const ready = (c: ClaimObj) => c.status?.conditions?.find((x) => x.type === 'Ready');

  it('kubectl create -f claim → Ready; the Sandbox is served under its name and runs commands; delete releases the VM', async () => {
    const t0 = Date.now();
    await claim('first', 'pool');
    await env.kubectl(['wait', '-n', ns.name, '--for=condition=Ready', 'sandboxclaim/first', '--timeout=90s']);
    process.stderr.write(`kubectl create sandboxclaim → Ready seen by kubectl wait: ${Date.now() - t0} ms\n`);
    const c = await getClaim('first');
    assert.equal(c.status?.sandbox?.name, 'first');
    assert.ok(c.status?.sandbox?.podIPs?.length, 'status.sandbox.podIPs names the node');
    const ann = c.metadata.annotations!;
    assert.equal(ann['agents.x-k8s.io/sandbox-name'], 'first');
    assert.equal(ann['agents.x-k8s.io/sandbox-template-ref'], 'tpl');
    assert.match(ann['sandbox.cocoonstack.io/claim-id']!, /^sb_[0-9a-f]{16}$/);
    assert.ok(ann['agents.x-k8s.io/controller-first-observed-at']);

    const sb = await getSandbox('first');
    assert.equal(sb.metadata.labels['agents.x-k8s.io/claim-uid'], c.metadata.uid);
    const owner = sb.metadata.ownerReferences?.find((r) => r.controller);
    assert.deepEqual(owner && { kind: owner.kind, name: owner.name, uid: owner.uid }, {
      kind: 'SandboxClaim',
      name: 'first',
      uid: c.metadata.uid,
    });
    assert.equal(sb.metadata.annotations['sandbox.cocoonstack.io/claim-id'], ann['sandbox.cocoonstack.io/claim-id']);
    assert.equal(ann['sandbox.cocoonstack.io/node'], sb.status.nodeName);
    const exec = JSON.parse(
      await env.kubectl(
        ['create', '--raw', `/apis/agents.x-k8s.io/v1beta1/namespaces/${ns.name}/sandboxes/first/exec`, '-f', '-'],
        JSON.stringify({
          apiVersion: 'agents.x-k8s.io/v1beta1',
          kind: 'SandboxExecOptions',
          command: ['sh', '-c', 'echo from-claim'],
        }),
      ),
    ) as { exitCode: number; stdout: string };
    assert.equal(exec.exitCode, 0);
    assert.equal(exec.stdout.trim(), 'from-claim');

    // The node's own table says the VM is claimed, and then that it is not.
    const id = ann['sandbox.cocoonstack.io/claim-id']!;
    const node = env.sandboxd.find((n) => n.node === sb.status.nodeName)!;
    const { readFile } = await import('node:fs/promises');
    const rootToken = (await readFile(node.tokenFile, 'utf8')).trim();
    const onNode = () =>
      fetch(`http://${node.address}/v1/sandboxes/${id}`, { headers: { authorization: `Bearer ${rootToken}` } }).then(
        (r) => r.status,
      );
    assert.equal(await onNode(), 200);
    await env.kubectl(['delete', '-n', ns.name, 'sandboxclaim', 'first']);
    await sandboxGone('first', 'the Sandbox of a deleted claim is gone from the aggregated API');
    assert.equal(await eventually(onNode, { until: (s) => s === 404, what: 'the VM released on its node' }), 404);
  });

  it('a claim for a pool no node serves, for a missing pool, or with env its template disallows gets Ready=False with the reason and no VM', async () => {
    await claim('unserved', 'unserved');
    await claim('nopool', 'no-such-pool');
    const u = await eventually(() => getClaim('unserved'), {
      until: (c) => ready(c)?.reason === 'PoolNotServed',
      timeoutMs: 30_000,
      what: 'Ready=False PoolNotServed',
    });
    assert.equal(ready(u)?.status, 'False');
    assert.match(ready(u)!.message, /no node serves pool \(template=sandbox\/minimal net=none size=xlarge\)/);
    const n = await eventually(() => getClaim('nopool'), {
      until: (c) => ready(c)?.reason === 'WarmPoolNotFound',
      timeoutMs: 30_000,
      what: 'Ready=False WarmPoolNotFound',
    });
    assert.match(ready(n)!.message, /SandboxWarmPool "no-such-pool" not found/);
    // The template sets no envVarsInjectionPolicy (Disallowed): the CRD layout's injection rules apply here too.
    await claim('with-env', 'pool', undefined, { env: [{ name: 'FOO', value: 'bar' }] });
    const e = await eventually(() => getClaim('with-env'), {
      until: (c) => ready(c)?.reason === 'EnvVarsInjectionRejected',
      timeoutMs: 30_000,
      what: 'Ready=False EnvVarsInjectionRejected',
    });
    assert.match(ready(e)!.message, /not allowed by the template policy/);
    for (const name of ['unserved', 'nopool', 'with-env'])
      assert.equal(
        (await env.kubectl(['get', '-n', ns.name, 'sandbox', name, '--ignore-not-found', '-o', 'name'])).trim(),
        '',
        `no Sandbox for ${name}`,
      );
  });

  it('shutdownTime with shutdownPolicy Delete: bound, then the claim is deleted and its VM released at expiry', async () => {
    const shutdownTime = new Date(Date.now() + 20_000).toISOString().replace(/\.\d+Z$/, 'Z');
    await claim('brief', 'pool', { shutdownTime, shutdownPolicy: 'Delete' });
    await env.kubectl(['wait', '-n', ns.name, '--for=condition=Ready', 'sandboxclaim/brief', '--timeout=90s']);
    const sb = await getSandbox('brief');
    const deadline = Date.parse(sb.metadata.annotations['sandbox.cocoonstack.io/deadline']!);
    assert.ok(
      Math.abs(deadline - Date.parse(shutdownTime)) <= 2000,
      `the node's lease ends at shutdownTime (${sb.metadata.annotations['sandbox.cocoonstack.io/deadline']} vs ${shutdownTime})`,
    );
    await eventually(
      () => env.kubectl(['get', '-n', ns.name, 'sandboxclaim', 'brief', '--ignore-not-found', '-o', 'name']),
      { until: (out) => out.trim() === '', timeoutMs: 60_000, intervalMs: 500, what: 'the expired claim deleted' },
    );
    assert.ok(Date.now() >= Date.parse(shutdownTime), 'not deleted before its shutdownTime');
    await sandboxGone('brief', 'the expired claim’s Sandbox released');
  });

  it('a Sandbox deleted from under its claim: Ready=False SandboxMissing, Finished, and never a second VM', async () => {
    await claim('orphaned', 'pool');
    await env.kubectl(['wait', '-n', ns.name, '--for=condition=Ready', 'sandboxclaim/orphaned', '--timeout=90s']);
    const first = await getSandbox('orphaned');
    await env.kubectl(['delete', '-n', ns.name, 'sandbox', 'orphaned']);
    const c = await eventually(() => getClaim('orphaned'), {
      until: (x) => ready(x)?.reason === 'SandboxMissing',
      timeoutMs: 30_000,
      what: 'Ready=False SandboxMissing',
    });
    assert.equal(ready(c)?.status, 'False');
    assert.equal(c.status?.conditions?.find((x) => x.type === 'Finished')?.status, 'True');
    // Passes keep running (every store change and resync): none may claim again for this claim.
    await sleep(3000);
    const again = (
      await env.kubectl([
        'get',
        '-n',
        ns.name,
        'sandbox',
        'orphaned',
        '--ignore-not-found',
        '-o',
        'jsonpath={.metadata.uid}',
      ])
    ).trim();
    assert.ok(again === '', `a second Sandbox was claimed for the claim (uid ${again}, first ${first.metadata.uid})`);
  });
});
