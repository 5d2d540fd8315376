/**
 * A sandbox's egress policy through sandboxd's HTTP API over the simulated engine (docs/sandboxd-api.md "Network
 * policy"): a claim's `network` is checked before anything is claimed and enforced by the VM before the claim answers;
 * `PUT /v1/sandboxes/{id}/network` changes it live (a tenant's layer only, never the platform's); the row reports it,
 * the state file keeps it, and fork children and clones of a checkpoint enforce their parent's.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { silentLogger } from '../../src/log/logger.js';
import type { NodeEngine } from '../../src/sandboxd/engine.js';
import { readEngineState } from '../../src/sandboxd/engine-state.js';
import type { SandboxdApi } from '../../src/sandboxd/http-api.js';
import type { SimulatedMicrovmDriver } from '../../src/vmm/index.js';
import { call } from '../support/sandboxd-daemon.js';
import { eventually } from '../support/eventually.js';
import { listenSandboxdApi, simNodeEngine } from '../support/sim-node.js';

const ROOT = 'root-token-for-network-policy-tests';
const TENANT = 'tenant-token-for-network-policy-tests';
const EGRESS = { template: 'sandbox/minimal', net: 'egress', size: 'small' } as const;
const NONE = { template: 'sandbox/minimal', net: 'none', size: 'small' } as const;

const tenantLayer = (deny: string[]) => ({
  source: 'e2b network',
  rules: [{ action: 'deny', to: deny }],
  otherwise: 'allow',
});
const templateLayer = {
  source: 'NetworkPolicy ns/allow-db',
  rules: [{ action: 'allow', to: ['10.1.2.0/24'], ports: [{ protocol: 'tcp', port: 5432 }] }],
  otherwise: 'deny',
};

describe('egress policy through the sandboxd API (sim engine)', () => {
  let dir: string;
  let engine: NodeEngine;
  let driver: SimulatedMicrovmDriver;
  let api: SandboxdApi;
  let base: string;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sbx-netpol-'));
    ({ engine, driver } = simNodeEngine(dir));
    await engine.start();
    engine.setTargets([
      { key: EGRESS, warm: 3 },
      { key: NONE, warm: 1 },
    ]);
    await eventually(() => engine.warmCount(EGRESS), { until: (n) => n === 3, timeoutMs: 10_000 });
    ({ api, base } = await listenSandboxdApi({
      engine,
      auth: { rootToken: ROOT, tenants: new Map([[TENANT, 'acme']]), allowAnonymous: false },
    }));
  });

  after(async () => {
    await api?.close();
    await engine?.close({ destroyVms: true });
    await rm(dir, { recursive: true, force: true });
  });

  /** The policy the VM of claim `id` was told to enforce. */
  const enforced = (id: string) => driver.get(engine.get(id)!.vmId)?.record.netPolicy;

  it('a claim carries its policy: the VM enforces it before the answer, the row and the state file report it', async () => {
    const network = { template: templateLayer, tenant: tenantLayer(['203.0.113.0/24']) };
    const r = await call(base, 'POST', '/v1/claim', { ...EGRESS, claim_ref: 'ns/a', network }, ROOT);
    assert.equal(r.status, 200, JSON.stringify(r.json));
    const id = r.json.id as string;
    assert.deepEqual(enforced(id), network, 'the VM enforces it as soon as the claim is answered');
    const rows = await call(base, 'GET', '/v1/sandboxes?claim_ref=ns/a', undefined, ROOT);
    const row = (rows.json.sandboxes as Array<{ id: string; network?: unknown }>)[0]!;
    assert.equal(row.id, id);
    assert.deepEqual(row.network, network);
    // Kept with the claim on disk (a restarted daemon reports it and its VM's record agrees).
    await engine.saveState();
    const saved = readEngineState(join(dir, 'state.json'), silentLogger).claims.find((c) => c.id === id);
    assert.deepEqual(saved?.network, network);
    // Without a policy: nothing recorded, nothing applied (the VM's default).
    const plain = await call(base, 'POST', '/v1/claim', { ...EGRESS, claim_ref: 'ns/b' }, ROOT);
    assert.equal(plain.status, 200);
    assert.equal(enforced(plain.json.id as string), undefined);
    assert.equal(engine.get(plain.json.id as string)?.network, undefined);
  });

  it('refuses a bad policy before anything is claimed: 400 naming the field, 403 for a tenant template layer', async () => {
    const claimedBefore = engine.claimedCount;
    const cases: Array<[unknown, string | null, number, RegExp]> = [
      [{ tenant: tenantLayer(['example.com']) }, ROOT, 400, /network\.tenant\.rules\[0\]\.to\[0\]: .*example\.com/],
      [{ tenant: tenantLayer(['10.0.0.0/33']) }, ROOT, 400, /prefix length/],
      [{ tenant: { source: 'x', rules: [], otherwise: 'maybe' } }, ROOT, 400, /network\.tenant\.otherwise/],
      [{ bogus: {} }, ROOT, 400, /network/],
      ['deny-all', ROOT, 400, /network: must be an object/],
      [{ template: templateLayer }, TENANT, 403, /network\.template: only the fleet's root token/],
    ];
    for (const [network, token, status, message] of cases) {
      const r = await call(base, 'POST', '/v1/claim', { ...EGRESS, network }, token);
      assert.equal(r.status, status, JSON.stringify(network));
      assert.match(String(r.json.error), message);
    }
    // A tenant layer on a NIC-less claim is a mistake the caller hears about.
    const none = await call(
      base,
      'POST',
      '/v1/claim',
      { ...NONE, network: { tenant: tenantLayer(['1.1.1.1']) } },
      ROOT,
    );
    assert.equal(none.status, 400);
    assert.match(String(none.json.error), /network rules need net=egress/);
    assert.equal(engine.claimedCount, claimedBefore, 'nothing was claimed');
  });

  it('PUT /v1/sandboxes/{id}/network changes it live: the tenant layer with the sandbox token, the template layer kept', async () => {
    const network = { template: templateLayer, tenant: tenantLayer(['198.51.100.7']) };
    const claim = await call(base, 'POST', '/v1/claim', { ...EGRESS, network }, ROOT);
    assert.equal(claim.status, 200);
    const id = claim.json.id as string;
    const token = claim.json.token as string;
    const put = (body: unknown, t: string | null = token) => call(base, 'PUT', `/v1/sandboxes/${id}/network`, body, t);

    const narrowed = tenantLayer(['198.51.100.7', '192.0.2.1']);
    const r = await put({ tenant: narrowed });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    assert.deepEqual((r.json.sandbox as { network?: unknown }).network, { template: templateLayer, tenant: narrowed });
    assert.deepEqual(enforced(id), { template: templateLayer, tenant: narrowed });

    // A sandbox token cannot touch the platform's layer; bad rules are a 400; nothing changes either way.
    const forged = await put({ template: { source: 'mine', rules: [], otherwise: 'allow' } });
    assert.equal(forged.status, 403);
    const invalid = await put({ tenant: tenantLayer(['not-an-address']) });
    assert.equal(invalid.status, 400);
    assert.match(String(invalid.json.error), /body\.tenant\.rules\[0\]\.to\[0\]/);
    assert.deepEqual(enforced(id), { template: templateLayer, tenant: narrowed });

    // null: the tenant layer goes, the template layer stays; unknown sandbox: 404; someone else's token: 404.
    const cleared = await put({ tenant: null });
    assert.equal(cleared.status, 200);
    assert.deepEqual(enforced(id), { template: templateLayer });
    assert.deepEqual(engine.get(id)?.network, { template: templateLayer });
    assert.equal((await call(base, 'PUT', '/v1/sandboxes/sb_nope/network', { tenant: null }, ROOT)).status, 404);
    assert.equal((await put({ tenant: null }, 'not-this-sandbox')).status, 404);
    // The root token may replace the template layer, and clear it back to the secure default.
    assert.equal((await put({ template: null }, ROOT)).status, 200);
    assert.equal(enforced(id), undefined);
    assert.equal(engine.get(id)?.network, undefined);
  });

  it("the ingress layer is the platform's: a root claim sets it, a tenant never does, a tenant's change keeps it", async () => {
    const ingress = {
      source: 'NetworkPolicy ns/from-office',
      rules: [{ action: 'allow', to: ['10.8.0.0/16'], ports: [{ protocol: 'tcp', port: 8080 }] }],
      otherwise: 'deny',
    };
    const refused = await call(base, 'POST', '/v1/claim', { ...EGRESS, network: { ingress } }, TENANT);
    assert.equal(refused.status, 403, JSON.stringify(refused.json));
    assert.match(String(refused.json.error), /network\.ingress: only the fleet's root token/);
    const claim = await call(base, 'POST', '/v1/claim', { ...EGRESS, network: { ingress } }, ROOT);
    assert.equal(claim.status, 200, JSON.stringify(claim.json));
    const id = claim.json.id as string;
    assert.deepEqual(enforced(id), { ingress });
    const put = (body: unknown, t: string = claim.json.token as string) =>
      call(base, 'PUT', `/v1/sandboxes/${id}/network`, body, t);

    for (const body of [{ ingress: null }, { ingress: { ...ingress, rules: [], otherwise: 'allow' } }]) {
      const r = await put(body);
      assert.equal(r.status, 403, JSON.stringify(body));
      assert.match(String(r.json.error), /body\.ingress: only the fleet's root token/);
    }
    const deny = tenantLayer(['192.0.2.1']);
    assert.equal((await put({ tenant: deny })).status, 200);
    assert.deepEqual(enforced(id), { ingress, tenant: deny });
    assert.equal((await put({ tenant: null })).status, 200);
    assert.deepEqual(enforced(id), { ingress }, "the tenant's own layer gone, the platform's ingress layer kept");
    assert.equal((await put({ ingress: null }, ROOT)).status, 200);
    assert.equal(enforced(id), undefined);
  });

  it('a hibernated sandbox takes a new policy (recorded, enforced once it runs); a net=none one is 400', async () => {
    const claim = await call(base, 'POST', '/v1/claim', { ...EGRESS }, ROOT);
    const id = claim.json.id as string;
    assert.equal((await call(base, 'POST', `/v1/sandboxes/${id}/hibernate`, {}, ROOT)).status, 204);
    const r = await call(base, 'PUT', `/v1/sandboxes/${id}/network`, { tenant: tenantLayer(['0.0.0.0/0']) }, ROOT);
    assert.equal(r.status, 200, JSON.stringify(r.json));
    assert.deepEqual(enforced(id), { tenant: tenantLayer(['0.0.0.0/0']) });
    assert.equal((await call(base, 'POST', `/v1/sandboxes/${id}/wake`, {}, ROOT)).status, 204);
    assert.deepEqual(engine.get(id)?.network, { tenant: tenantLayer(['0.0.0.0/0']) });

    const none = await call(base, 'POST', '/v1/claim', { ...NONE }, ROOT);
    const n = await call(
      base,
      'PUT',
      `/v1/sandboxes/${none.json.id}/network`,
      { tenant: tenantLayer(['1.1.1.1']) },
      ROOT,
    );
    assert.equal(n.status, 400);
    assert.match(String(n.json.error), /need net=egress/);
  });

  it("fork children and clones of a checkpoint enforce the parent's policy; a checkpoint claim may replace a layer", async () => {
    const network = { template: templateLayer, tenant: tenantLayer(['203.0.113.9']) };
    const claim = await call(base, 'POST', '/v1/claim', { ...EGRESS, network }, ROOT);
    const id = claim.json.id as string;
    const fork = await call(base, 'POST', `/v1/sandboxes/${id}/fork`, { count: 2 }, ROOT);
    assert.equal(fork.status, 200, JSON.stringify(fork.json));
    for (const c of fork.json.children as Array<{ id: string; sandbox: { network?: unknown } }>) {
      assert.deepEqual(enforced(c.id), network, 'a fork child enforces its parent policy');
      assert.deepEqual(c.sandbox.network, network);
    }
    const ck = await call(base, 'POST', `/v1/sandboxes/${id}/checkpoint`, {}, ROOT);
    assert.equal(ck.status, 200, JSON.stringify(ck.json));
    const ckId = (ck.json.checkpoint as { id: string }).id;
    const clone = await call(base, 'POST', `/v1/checkpoints/${ckId}/claim`, {}, ROOT);
    assert.equal(clone.status, 200, JSON.stringify(clone.json));
    assert.deepEqual(enforced(clone.json.id as string), network, 'a clone enforces the policy of its checkpoint');
    // A checkpoint claim's `network` replaces the layers it names (null: the default) and keeps the others.
    const other = await call(base, 'POST', `/v1/checkpoints/${ckId}/claim`, { network: { tenant: null } }, ROOT);
    assert.equal(other.status, 200, JSON.stringify(other.json));
    assert.deepEqual(enforced(other.json.id as string), { template: templateLayer });
    const bad = await call(base, 'POST', `/v1/checkpoints/${ckId}/claim`, { network: { tenant: 'x' } }, ROOT);
    assert.equal(bad.status, 400);
  });
});
