/**
 * The claim gateway with Kubernetes identity (L2, docs/claim-gateway.md) on the aggregated layout's nodes: a
 * ServiceAccount token with RBAC `create sandboxclaims` claims a warm microVM on the node, the SandboxClaim is
 * recorded (Bound, Ready) within a second and the Sandbox is served by the aggregated API; other namespaces,
 * garbage tokens and revoked RBAC are refused; bad input gets clear answers; deleting the claim releases the VM.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { aggregatedNamespace, getAggregated, TEST_TEMPLATE, type AggregatedEnv } from '../support/aggregated.js';
import { eventually } from '../support/eventually.js';
import { claimGatewayFixture, gatewayClaim, type ClaimObj } from '../support/claim-gateway.js';

describe('claim gateway with Kubernetes identity (aggregated layout, real microVMs)', () => {
  let env: AggregatedEnv;
  let a: { name: string; cleanup(): Promise<void> };
  let b: { name: string; cleanup(): Promise<void> };
  let token: string;
  let gw: string;
  let rootToken: string;
  const node = () => env.sandboxd[0]!;
  const getClaim = async (ns: string, name: string) =>
    JSON.parse(await env.kubectl(['get', '-n', ns, 'sandboxclaim', name, '-o', 'json'])) as ClaimObj;
  const nodeSandbox = (id: string) =>
    fetch(`http://${node().address}/v1/sandboxes/${id}`, { headers: { authorization: `Bearer ${rootToken}` } });

  before(async () => {
    env = await getAggregated();
    a = await aggregatedNamespace('gwa');
    b = await aggregatedNamespace('gwb');
    token = await claimGatewayFixture(env.kubectl, a.name);
    gw = node().claimAddress!;
    rootToken = (await readFile(node().tokenFile, 'utf8')).trim();
  });
  after(async () => {
    await a?.cleanup();
    await b?.cleanup();
  });

  it('claims at once, records the SandboxClaim Bound and Ready within 1 s, serves the Sandbox through the API', async () => {
    const t0 = Date.now();
    const r = await gatewayClaim(gw, token, { namespace: a.name, name: 'gw-first', warm_pool: 'pool' });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    const answeredAt = Date.now();
    assert.match(String(r.json.id), /^sb_[0-9a-f]{16}$/);
    assert.ok(r.json.token, 'the sandbox token is in the answer');
    assert.equal(r.json.node, node().node);
    assert.equal(r.json.name, 'gw-first');
    const claim = await eventually(() => getClaim(a.name, 'gw-first'), {
      timeoutMs: 1000,
      intervalMs: 20,
      until: (c) => c.status?.conditions?.some((x) => x.type === 'Bound' && x.status === 'True') === true,
      what: 'the SandboxClaim recorded Bound within 1 s of the answer',
    });
    const recordedMs = Date.now() - answeredAt;
    // A bound on a stuck claim, not a latency figure: the first claim of a namespace pays an uncached TokenReview and
    // SubjectAccessReview, and under a loaded CI machine took 3.1 s once. The claim's latency is bench/claim's
    // (PERFORMANCE.md, "claim gateway": sub-millisecond p50).
    assert.ok(answeredAt - t0 < 15_000, `answered in ${answeredAt - t0} ms`);
    assert.equal(claim.status!.sandbox!.name, 'gw-first');
    const ready = claim.status!.conditions!.find((c) => c.type === 'Ready');
    assert.equal(ready?.status, 'True');
    const bound = claim.status!.conditions!.find((c) => c.type === 'Bound')!;
    assert.equal(bound.reason, 'NodeLocalClaim');
    const ann = claim.metadata.annotations!;
    assert.equal(ann['sandbox.cocoonstack.io/claim-id'], r.json.id);
    assert.equal(ann['agents.x-k8s.io/sandbox-name'], 'gw-first');
    assert.equal(ann['agents.x-k8s.io/sandbox-template-ref'], 'tpl');
    assert.match(ann['sandbox.cocoonstack.io/claimed-by']!, /^system:serviceaccount:.*:claimer$/);
    assert.ok(ann['agents.x-k8s.io/controller-first-observed-at']);
    assert.equal(claim.metadata.labels!['sandbox.cocoonstack.io/gateway-node'], node().node);
    assert.equal(claim.spec.warmPoolRef.name, 'pool');
    process.stderr.write(`gateway claim answered in ${answeredAt - t0} ms, recorded ${recordedMs} ms later\n`);

    await env.kubectl(['wait', '-n', a.name, '--for=condition=Ready', 'sandboxclaim/gw-first', '--timeout=10s']);
    const sb = await eventually(
      async () => JSON.parse(await env.kubectl(['get', '-n', a.name, 'sandbox', 'gw-first', '-o', 'json'])),
      { what: 'the Sandbox through the aggregated API' },
    );
    assert.equal(sb.metadata.annotations['sandbox.cocoonstack.io/claim-id'], r.json.id);
    assert.equal(sb.metadata.annotations['sandbox.cocoonstack.io/delivered-by'], 'claim-gateway');
    assert.equal(sb.status.nodeName, node().node);
    assert.equal(sb.status.conditions.find((c: { type: string }) => c.type === 'Ready').status, 'True');
    assert.equal(sb.spec.podTemplate.spec.containers[0].image, TEST_TEMPLATE);
    assert.equal(sb.metadata.annotations['sandbox.cocoonstack.io/token'], undefined, 'no token on reads');

    const again = await gatewayClaim(gw, token, { namespace: a.name, name: 'gw-first', warm_pool: 'pool' });
    assert.equal(again.status, 409, 'a live claim name is not claimed twice');
  });

  it('refuses other namespaces (403), garbage tokens (401) and bad input (400, 404, 413, 503), spending no VM', async () => {
    const before = await claimCount();
    const cases: Array<[string, string, unknown, number, RegExp]> = [
      ['namespace b', token, { namespace: b.name, name: 'x', warm_pool: 'pool' }, 403, /may not create sandboxclaims/],
      ['garbage token', 'garbage', { namespace: a.name, name: 'x', warm_pool: 'pool' }, 401, /invalid bearer token/],
      ['malformed JSON', token, '{"namespace":', 400, /invalid request body/],
      ['no name', token, { namespace: a.name, warm_pool: 'pool' }, 400, /name: required/],
      ['bad name', token, { namespace: a.name, name: 'Not_A_Name', warm_pool: 'pool' }, 400, /RFC 1123/],
      ['unknown field', token, { namespace: a.name, name: 'x', warm_pool: 'pool', template: 't' }, 400, /unknown/],
      ['no such pool', token, { namespace: a.name, name: 'x', warm_pool: 'nope' }, 404, /SandboxWarmPool .* not found/],
      [
        'a pool no node serves',
        token,
        { namespace: a.name, name: 'x', warm_pool: 'unserved' },
        503,
        /serves no warm pool/,
      ],
      ['over the cap', token, 'x'.repeat((1 << 20) + 10), 413, /larger than/],
    ];
    for (const [what, t, body, status, message] of cases) {
      const r = await gatewayClaim(gw, t, body);
      assert.equal(r.status, status, `${what}: ${JSON.stringify(r.json)}`);
      assert.match(String(r.json.error), message, what);
      if (status === 503) assert.equal(r.headers.get('retry-after'), '5', `${what}: Retry-After`);
    }
    assert.equal(await claimCount(), before, 'nothing was claimed');
  });

  it('refuses within the cache TTL once RBAC is revoked', async () => {
    // A claim for a pool that does not exist passes authorization and then fails (404): a probe that spends no VM.
    const probe = () => gatewayClaim(gw, token, { namespace: a.name, name: 'probe', warm_pool: 'nope' });
    assert.equal((await probe()).status, 404);
    await env.kubectl(['delete', 'rolebinding', '-n', a.name, 'claimer']);
    const revokedAt = Date.now();
    const refused = await eventually(probe, {
      timeoutMs: 12_000,
      intervalMs: 200,
      until: (r) => r.status === 403,
      what: 'a 403 within the 10 s cache TTL',
    });
    const ms = Date.now() - revokedAt;
    process.stderr.write(`revoked RBAC refused after ${ms} ms\n`);
    assert.match(String(refused.json.error), /may not create sandboxclaims/);
    assert.ok(ms <= 11_000, `refused ${ms} ms after the RoleBinding was deleted (cache TTL 10 s)`);
    await env.kubectl([
      'create',
      'rolebinding',
      'claimer',
      '-n',
      a.name,
      '--role=claimer',
      `--serviceaccount=${a.name}:claimer`,
    ]);
    await eventually(probe, {
      timeoutMs: 15_000,
      intervalMs: 200,
      until: (r) => r.status === 404,
      what: 'granted again',
    });
  });

  it('deleting the SandboxClaim releases the VM; a VM released by its token marks its claim', async () => {
    const r = await gatewayClaim(gw, token, { namespace: a.name, name: 'gw-del', warm_pool: 'pool' });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    await eventually(() => getClaim(a.name, 'gw-del'), {
      until: (c) => c.status?.sandbox?.name === 'gw-del',
      what: 'recorded',
    });
    assert.equal((await nodeSandbox(String(r.json.id))).status, 200);
    await env.kubectl(['delete', '-n', a.name, 'sandboxclaim', 'gw-del']);
    await eventually(async () => (await nodeSandbox(String(r.json.id))).status, {
      timeoutMs: 15_000,
      until: (s) => s === 404,
      what: 'the VM released after its claim was deleted',
    });
    await eventually(
      () => env.kubectl(['get', '-n', a.name, 'sandbox', 'gw-del', '--ignore-not-found', '-o', 'name']),
      {
        until: (out) => out.trim() === '',
        what: 'the Sandbox gone from the aggregated API',
      },
    );

    const k = await gatewayClaim(gw, token, { namespace: a.name, name: 'gw-kept', warm_pool: 'pool' });
    assert.equal(k.status, 200, JSON.stringify(k.json));
    await eventually(() => getClaim(a.name, 'gw-kept'), { until: (c) => c.status?.sandbox?.name === 'gw-kept' });
    const rel = await fetch(`http://${node().address}/v1/sandboxes/${k.json.id}/release`, {
      method: 'POST',
      headers: { authorization: `Bearer ${k.json.token}` },
    });
    assert.equal(rel.status, 204);
    const gone = await eventually(() => getClaim(a.name, 'gw-kept'), {
      until: (c) => c.status?.conditions?.some((x) => x.type === 'Ready' && x.status === 'False') === true,
      what: 'the claim of a released sandbox Ready=False',
    });
    assert.equal(gone.status!.conditions!.find((c) => c.type === 'Ready')!.reason, 'SandboxMissing');
    assert.equal(gone.status!.sandbox, undefined);
  });

  /** This test's claims on the gateway's node (other tests claim there too). */
  async function claimCount(): Promise<number> {
    await sleep(50);
    const res = await fetch(`http://${node().address}/v1/sandboxes`, {
      headers: { authorization: `Bearer ${rootToken}` },
    });
    const rows = ((await res.json()) as { sandboxes: Array<{ claim_ref?: string }> }).sandboxes;
    return rows.filter((r) => r.claim_ref?.startsWith(`${a.name}/`) || r.claim_ref?.startsWith(`${b.name}/`)).length;
  }
});
