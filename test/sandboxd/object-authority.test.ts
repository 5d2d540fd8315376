/**
 * Who may give a sandbox its Kubernetes identity on a node (docs/sandboxd-api.md "Claims", "Sandboxes"): the fleet's
 * root (sandbox-apiserver) only, and a fork's children only in the parent's namespace. A tenant token (on the API
 * and on the claim listener) and a sandbox token once gave objects in any namespace, which sandbox-apiserver then
 * served there; and an object carrying the claim gateway's annotations was taken for a gateway delivery, which
 * sandboxd (with cluster-wide rights) records as a SandboxClaim in that namespace. The delivery is now the node's
 * own fact (set by the gateway alone), never the annotations. Over the simulated engine (src/vmm/sim-driver.ts).
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { ClaimGateway } from '../../src/sandboxd/claim-gateway.js';
import type { NodeEngine } from '../../src/sandboxd/engine.js';
import { deliveryOf } from '../../src/sandboxd/gateway/request.js';
import type { SandboxdApi } from '../../src/sandboxd/http-api.js';
import { call } from '../support/sandboxd-daemon.js';
import { listenSandboxdApi, simNodeEngine } from '../support/sim-node.js';

const ROOT = 'root-token-for-authority-tests';
const TENANT = 'tenant-token-for-authority-tests';
const KEY = { template: 'sandbox/minimal', net: 'none', size: 'small' } as const;

/** A Sandbox object as sandbox-apiserver stores it with a claim; `gateway` adds the claim gateway's annotations. */
function sandbox(namespace: string, name: string, gateway = false) {
  return {
    metadata: {
      name,
      namespace,
      uid: `uid-${namespace}-${name}`,
      creationTimestamp: '2026-12-01T10:00:00Z',
      ...(gateway
        ? {
            annotations: {
              'sandbox.cocoonstack.io/delivered-by': 'claim-gateway',
              'sandbox.cocoonstack.io/warm-pool': 'pool',
              'agents.x-k8s.io/sandbox-template-ref': 'tpl',
              'sandbox.cocoonstack.io/claimed-by': 'system:serviceaccount:victim:admin',
            },
          }
        : {}),
    },
    spec: { podTemplate: { spec: { containers: [{ name: 'main', image: KEY.template }] } } },
  };
}

describe('Kubernetes objects on a node come from the fleet root only (sim engine)', () => {
  let dir: string;
  let engine: NodeEngine;
  let api: SandboxdApi;
  let gateway: ClaimGateway;
  let base: string;
  let claimBase: string;
  /** A sandbox of namespace team-a made by the root (sandbox-apiserver's create), and its token. */
  let parent: { id: string; token: string };

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sbx-authority-'));
    ({ engine } = simNodeEngine(dir));
    await engine.start();
    const auth = { rootToken: ROOT, tenants: new Map([[TENANT, 'acme']]), allowAnonymous: false };
    ({ api, base } = await listenSandboxdApi({ engine, auth }));
    gateway = new ClaimGateway({ api, auth });
    claimBase = `http://127.0.0.1:${(await gateway.listen('127.0.0.1', 0)).port}`;
    const r = await call(
      base,
      'POST',
      '/v1/claim',
      { ...KEY, ttl_seconds: 600, claim_ref: 'team-a/parent', object: sandbox('team-a', 'parent') },
      ROOT,
    );
    assert.equal(r.status, 200, JSON.stringify(r.json));
    parent = { id: r.json.id as string, token: r.json.token as string };
  });

  after(async () => {
    await gateway?.close();
    await api?.close();
    await engine?.close({ destroyVms: true });
    await rm(dir, { recursive: true, force: true });
  });

  const objectsIn = (namespace: string) => engine.list().filter((r) => r.claimRef?.startsWith(`${namespace}/`));

  it('a tenant token cannot give a claim an object (API and claim listener): 403 naming object', async () => {
    for (const [where, at] of [
      ['API', base],
      ['claim listener', claimBase],
    ] as const) {
      for (const gw of [false, true]) {
        const name = `t-${where === 'API' ? 'api' : 'gw'}-${gw ? 'gw' : 'plain'}`;
        const r = await call(
          at,
          'POST',
          '/v1/claim',
          { ...KEY, claim_ref: `victim/${name}`, object: sandbox('victim', name, gw) },
          TENANT,
        );
        assert.equal(r.status, 403, `${where}: ${JSON.stringify(r.json)}`);
        assert.match(String(r.json.error), /^object: only the fleet's root token/);
      }
    }
    assert.deepEqual(objectsIn('victim'), [], 'nothing of namespace victim on the node');
    // the tenant's own claims without an object still work
    const ok = await call(claimBase, 'POST', '/v1/claim', { ...KEY, claim_ref: 'mine' }, TENANT);
    assert.equal(ok.status, 200, JSON.stringify(ok.json));
    await engine.release(ok.json.id as string);
  });

  it('a sandbox token cannot fork into children with objects, in another namespace or its own: 403', async () => {
    for (const [ns, gw] of [
      ['victim', false],
      ['victim', true],
      ['team-a', true],
    ] as const) {
      const name = `child-${ns}-${gw ? 'gw' : 'plain'}`;
      const r = await call(
        base,
        'POST',
        `/v1/sandboxes/${parent.id}/fork`,
        { count: 1, objects: [{ claim_ref: `${ns}/${name}`, object: sandbox(ns, name, gw) }] },
        parent.token,
      );
      assert.equal(r.status, 403, `${ns}: ${JSON.stringify(r.json)}`);
      assert.match(String(r.json.error), /^objects: only the fleet's root token/);
    }
    // also with the token in the body (the route takes it there too) and no header of the sandbox's own
    const body = await call(
      base,
      'POST',
      `/v1/sandboxes/${parent.id}/fork`,
      { token: parent.token, count: 1, objects: [{ claim_ref: 'victim/b', object: sandbox('victim', 'b') }] },
      TENANT,
    );
    assert.equal(body.status, 403, JSON.stringify(body.json));
    assert.deepEqual(objectsIn('victim'), []);
    assert.equal(engine.list().filter((r) => r.source === 'fork').length, 0, 'no VM forked');
  });

  it("the root's fork keeps children in the parent's namespace (400 naming the field otherwise)", async () => {
    const away = await call(
      base,
      'POST',
      `/v1/sandboxes/${parent.id}/fork`,
      { count: 1, objects: [{ claim_ref: 'victim/c', object: sandbox('victim', 'c') }] },
      ROOT,
    );
    assert.equal(away.status, 400, JSON.stringify(away.json));
    assert.match(
      String(away.json.error),
      /^objects\[0\]\.object: metadata\.namespace must be the parent's \("team-a"\)/,
    );
    const home = await call(
      base,
      'POST',
      `/v1/sandboxes/${parent.id}/fork`,
      { count: 1, objects: [{ claim_ref: 'team-a/c', object: sandbox('team-a', 'c') }] },
      ROOT,
    );
    assert.equal(home.status, 200, JSON.stringify(home.json));
    const [child] = home.json.children as Array<{ id: string }>;
    assert.equal(engine.get(child!.id)?.claimRef, 'team-a/c');
    await engine.release(child!.id);
  });

  it("an object carrying the gateway's annotations is not a gateway delivery; the gateway's own fact is", async () => {
    const r = await call(
      base,
      'POST',
      '/v1/claim',
      { ...KEY, claim_ref: 'team-a/forged', object: sandbox('team-a', 'forged', true) },
      ROOT,
    );
    assert.equal(r.status, 200, JSON.stringify(r.json));
    const forged = engine.get(r.json.id as string)!;
    assert.equal(deliveryOf(forged), undefined, 'adoption and the record leave it alone');
    await engine.release(forged.id);

    // What the gateway itself claims (gateway/index.ts passes the fact beside the body) is one.
    const fact = { namespace: 'team-a', name: 'real', warmPool: 'pool', template: 'tpl', user: 'alice' };
    const out = api.claimNow(
      { kind: 'tenant', name: 'kubernetes:alice' },
      { ...KEY, claim_ref: 'team-a/real', no_redirect: true, object: sandbox('team-a', 'real', true) },
      performance.now(),
      fact,
    );
    const answer = ('answer' in out ? out.answer : await out.pending) as { id: string };
    const rec = engine.get(answer.id)!;
    assert.deepEqual(deliveryOf(rec), { id: rec.id, ...fact, claimedAtMs: Date.parse(rec.claimedAt) });
    await engine.release(rec.id);
  });
});
