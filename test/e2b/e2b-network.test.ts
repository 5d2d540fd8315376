/**
 * e2b's network options on the e2b control plane, in-process over a simulated node (test/support/sim-e2b.ts): a
 * create's `network.allowOut`/`denyOut` and `allow_internet_access` become the sandbox's tenant layer, which its VM
 * enforces from the create's answer on; `PUT /sandboxes/{id}/network` replaces it live (never the platform's
 * template layer); getInfo reports what the node enforces; bad entries are a 400 `{code, message}` naming the entry
 * with nothing claimed; on a NIC-less template the options are accepted and moot (old SDKs send
 * `allow_internet_access: true` on every create).
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { e2bTenantLayer, type VmNetworkPolicy } from '../../src/api/vm-network.js';
import type { TemplateAlias } from '../../src/apiserver/e2b/templates.js';
import { call } from '../support/sandboxd-daemon.js';
import { SIM_E2B_KEY, SIM_E2B_ROOT, startSimE2b, type SimE2b } from '../support/sim-e2b.js';

const TEMPLATES: TemplateAlias[] = [
  { id: 'base', template: 'sandbox/minimal', size: 'small', net: 'none' },
  { id: 'online', template: 'sandbox/minimal', size: 'small', net: 'egress' },
];
const EGRESS = { template: 'sandbox/minimal', net: 'egress', size: 'small' } as const;
const NONE = { template: 'sandbox/minimal', net: 'none', size: 'small' } as const;

describe('e2b network options (sim node)', () => {
  let dir: string;
  let p: SimE2b;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sbx-e2b-net-'));
    p = await startSimE2b(dir, TEMPLATES, [
      { key: EGRESS, warm: 4 },
      { key: NONE, warm: 2 },
    ]);
  });

  after(async () => {
    await p?.close();
    await rm(dir, { recursive: true, force: true });
  });

  const e2b = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${p.url}${path}`, {
      method,
      headers: { 'x-api-key': SIM_E2B_KEY, 'content-type': 'application/json' },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await res.text();
    return { status: res.status, json: (text ? JSON.parse(text) : {}) as Record<string, unknown> };
  };
  const create = async (body: Record<string, unknown>) => {
    // A 503 is "the pool is refilling" (the SDKs retry it): waited out, as the tests before this one take VMs.
    let r = await e2b('POST', '/v2/sandboxes', body);
    for (const until = Date.now() + 10_000; r.status === 503 && Date.now() < until;) {
      await new Promise((res) => setTimeout(res, 50));
      r = await e2b('POST', '/v2/sandboxes', body);
    }
    assert.equal(r.status, 201, JSON.stringify(r.json));
    return r.json.sandboxID as string;
  };
  /** The node's claim of e2b sandbox `id`. */
  const claimOf = (id: string) => p.engine.get(p.store.get(`e2b/${id}`)!.claimId)!;
  /** What its VM was told to enforce. */
  const enforced = (id: string): VmNetworkPolicy | undefined => p.driver.get(claimOf(id).vmId)?.record.netPolicy;
  const info = async (id: string) => {
    const r = await e2b('GET', `/sandboxes/${id}`);
    assert.equal(r.status, 200, JSON.stringify(r.json));
    return r.json as { allowInternetAccess?: boolean; network?: { allowOut?: string[]; denyOut?: string[] } };
  };

  it('a create with allowOut/denyOut: the VM enforces them as its tenant layer from the answer on; getInfo says so', async () => {
    const id = await create({
      templateID: 'online',
      network: { allowOut: ['1.1.1.1'], denyOut: ['0.0.0.0/0'], allowPublicTraffic: false },
    });
    const tenant = e2bTenantLayer({ allowOut: ['1.1.1.1'], denyOut: ['0.0.0.0/0'] });
    assert.deepEqual(enforced(id), { tenant });
    assert.equal(claimOf(id).key.net, 'egress');
    const got = await info(id);
    assert.equal(got.allowInternetAccess, false);
    assert.deepEqual(got.network?.allowOut, ['1.1.1.1']);
    assert.deepEqual(got.network?.denyOut, ['0.0.0.0/0']);

    // allow_internet_access: false keeps the egress lane (so updateNetwork can open it later) and denies everything.
    const off = await create({ templateID: 'online', allow_internet_access: false });
    assert.equal(claimOf(off).key.net, 'egress');
    assert.deepEqual(enforced(off), { tenant: e2bTenantLayer({ allowInternetAccess: false }) });
    assert.equal((await info(off)).allowInternetAccess, false);

    // The default, and allow_internet_access: true alone, narrow nothing: no layer, no policy call.
    for (const body of [{ templateID: 'online' }, { templateID: 'online', allow_internet_access: true }]) {
      const on = await create(body);
      assert.equal(enforced(on), undefined, JSON.stringify(body));
      assert.equal((await info(on)).allowInternetAccess, true);
    }
  });

  it('on a NIC-less template the options are accepted and moot: old SDKs send allow_internet_access: true', async () => {
    for (const body of [
      { templateID: 'base', allow_internet_access: true },
      { templateID: 'base', allow_internet_access: false, network: { denyOut: ['10.0.0.0/8'] } },
    ]) {
      const id = await create(body);
      assert.equal(claimOf(id).key.net, 'none', `${JSON.stringify(body)}: the template's lane`);
      assert.equal(claimOf(id).network, undefined);
      assert.equal((await info(id)).allowInternetAccess, false);
    }
  });

  it('refuses entries that are not addresses, and what it does not serve: 400 {code, message}, nothing claimed', async () => {
    const before = p.engine.claimedCount;
    const cases: Array<[Record<string, unknown>, RegExp]> = [
      [{ network: { denyOut: ['1.1.1.1', 'example.com'] } }, /^network\.denyOut\[1\]: "example\.com" is not an IP/],
      [{ network: { allowOut: ['10.0.0.0/40'] } }, /^network\.allowOut\[0\]: .*prefix length/],
      [{ network: { allowOut: '1.1.1.1' } }, /^network\.allowOut: must be an array/],
      [{ network: { rules: { 'example.com': [{}] } } }, /^network\.rules: not supported/],
      [{ network: { egressProxy: { address: 'proxy:1080' } } }, /^network\.egressProxy: not supported/],
      [{ network: { maskRequestHost: 'x' } }, /^network\.maskRequestHost: not supported/],
    ];
    for (const [extra, message] of cases) {
      const r = await e2b('POST', '/v2/sandboxes', { templateID: 'online', ...extra });
      assert.equal(r.status, 400, JSON.stringify(extra));
      assert.equal(r.json.code, 400);
      assert.match(String(r.json.message), message);
    }
    // What the SDK sends for "no rules" is no rule.
    const id = await create({ templateID: 'online', network: { rules: {}, denyOut: ['192.0.2.1'] } });
    assert.deepEqual(enforced(id), { tenant: e2bTenantLayer({ denyOut: ['192.0.2.1'] }) });
    assert.equal(p.engine.claimedCount, before + 1, 'only the valid create claimed');
  });

  it('PUT /sandboxes/{id}/network replaces the tenant layer live and keeps the platform template layer', async () => {
    const id = await create({ templateID: 'online', network: { denyOut: ['198.51.100.0/24'] } });
    // The platform's layer (as the CRD layout's NetworkPolicies give it), set on the node with its root token.
    const template = { source: 'NetworkPolicy e2b/db', rules: [{ action: 'allow', to: [] }], otherwise: 'deny' };
    const root = await call(p.node, 'PUT', `/v1/sandboxes/${claimOf(id).id}/network`, { template }, SIM_E2B_ROOT);
    assert.equal(root.status, 200, JSON.stringify(root.json));

    const put = (body: unknown) => e2b('PUT', `/sandboxes/${id}/network`, body);
    const r = await put({ denyOut: ['8.8.8.8'] });
    assert.equal(r.status, 204, JSON.stringify(r.json));
    assert.deepEqual(enforced(id), { template, tenant: e2bTenantLayer({ denyOut: ['8.8.8.8'] }) });
    let got = await info(id);
    assert.deepEqual(got.network?.denyOut, ['8.8.8.8']);
    assert.equal(got.allowInternetAccess, true);

    assert.equal((await put({ allow_internet_access: false, allowOut: ['1.1.1.1'] })).status, 204);
    assert.deepEqual(enforced(id), {
      template,
      tenant: e2bTenantLayer({ allowInternetAccess: false, allowOut: ['1.1.1.1'] }),
    });
    got = await info(id);
    assert.equal(got.allowInternetAccess, false);
    assert.deepEqual(got.network?.allowOut, ['1.1.1.1']);

    // Nothing given: the tenant layer goes (internet back on); the template layer stays.
    assert.equal((await put({})).status, 204);
    assert.deepEqual(enforced(id), { template });
    assert.equal((await info(id)).allowInternetAccess, true);

    for (const [body, status, message] of [
      [{ denyOut: ['metadata.google.internal'] }, 400, /^denyOut\[0\]: /],
      [{ rules: { 'a.com': [{}] } }, 400, /^rules: not supported/],
      [{ egressProxy: { address: 'p:1' } }, 400, /^egressProxy: not supported/],
    ] as const) {
      const bad = await put(body);
      assert.equal(bad.status, status, JSON.stringify(body));
      assert.equal(bad.json.code, status);
      assert.match(String(bad.json.message), message);
    }
    assert.deepEqual(enforced(id), { template }, 'a refused update changes nothing');
    const gone = await e2b('PUT', '/sandboxes/inope/network', { denyOut: ['8.8.8.8'] });
    assert.equal(gone.status, 404);
    assert.equal(gone.json.code, 404);
    // A NIC-less sandbox: accepted, nothing to narrow.
    const offline = await create({ templateID: 'base' });
    assert.equal((await e2b('PUT', `/sandboxes/${offline}/network`, { denyOut: ['8.8.8.8'] })).status, 204);
    assert.equal(claimOf(offline).network, undefined);
  });

  it("fork children and sandboxes from a snapshot: the parent's layers, a create's own tenant rules", async () => {
    const id = await create({ templateID: 'online', network: { denyOut: ['203.0.113.0/24'] } });
    const tenant = e2bTenantLayer({ denyOut: ['203.0.113.0/24'] });
    const fork = await e2b('POST', `/sandboxes/${id}/fork`, { count: 1 });
    assert.equal(fork.status, 201, JSON.stringify(fork.json));
    const child = (fork.json as unknown as Array<{ sandbox: { sandboxID: string } }>)[0]!.sandbox.sandboxID;
    assert.deepEqual(enforced(child), { tenant });
    assert.deepEqual((await info(child)).network?.denyOut, ['203.0.113.0/24']);

    const snap = await e2b('POST', `/sandboxes/${id}/snapshots`, {});
    assert.equal(snap.status, 201, JSON.stringify(snap.json));
    const snapshotID = snap.json.snapshotID as string;
    // A create states its tenant rules whole: none given, none kept; given, those.
    const plain = await create({ templateID: snapshotID });
    assert.equal(claimOf(plain).key.net, 'egress');
    assert.equal(enforced(plain), undefined);
    const narrowed = await create({ templateID: snapshotID, network: { denyOut: ['192.0.2.0/24'] } });
    assert.deepEqual(enforced(narrowed), { tenant: e2bTenantLayer({ denyOut: ['192.0.2.0/24'] }) });
  });
});
