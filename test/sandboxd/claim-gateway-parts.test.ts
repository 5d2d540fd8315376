/**
 * Pure parts of the claim gateway with Kubernetes identity (docs/claim-gateway.md): the request's fields and the
 * 400s naming them, the Sandbox object a delivery carries and the delivery read back from a claim-table record
 * (what orphan adoption sees after a restart), and the UID ledger on disk (kept across a restart, refused when
 * corrupt rather than taken as empty). The gateway against a real control plane: test/aggregated/claim-gateway*.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { SandboxError } from '../../src/errors.js';
import { silentLogger } from '../../src/log/logger.js';
import type { SandboxRecord } from '../../src/sandboxd/claims.js';
import { DeliveryLedger } from '../../src/sandboxd/gateway/ledger.js';
import type { ResolvedPool } from '../../src/sandboxd/gateway/pools.js';
import { deliveryFact, deliveryOf, parseKubeClaim, sandboxObject } from '../../src/sandboxd/gateway/request.js';

const badRequest = (message: RegExp) => (err: unknown) =>
  err instanceof SandboxError && err.code === 'sandboxd.bad-request' && message.test(err.message);

describe('claim gateway request', () => {
  it('takes namespace, name, warm_pool and ttl_seconds', () => {
    assert.deepEqual(parseKubeClaim({ namespace: 'team-a', name: 'c.1', warm_pool: 'py', ttl_seconds: 60 }), {
      namespace: 'team-a',
      name: 'c.1',
      warmPool: 'py',
      ttlSeconds: 60,
    });
    assert.equal(parseKubeClaim({ namespace: 'a', name: 'b', warm_pool: 'c' }).ttlSeconds, undefined);
  });

  it('refuses anything else with a 400 naming the field', () => {
    const cases: Array<[Record<string, unknown>, RegExp]> = [
      [{ name: 'b', warm_pool: 'c' }, /^namespace: required/],
      [{ namespace: 'a', warm_pool: 'c' }, /^name: required/],
      [{ namespace: 'a', name: 'b' }, /^warm_pool: required/],
      [{ namespace: 'a', name: 7, warm_pool: 'c' }, /^name: required \(a string\)/],
      [{ namespace: 'A', name: 'b', warm_pool: 'c' }, /^namespace: "A" is not a namespace name/],
      [{ namespace: 'a.b', name: 'b', warm_pool: 'c' }, /^namespace: /],
      [{ namespace: 'a', name: 'Not_A_Name', warm_pool: 'c' }, /^name: .*RFC 1123/],
      [{ namespace: 'a', name: 'x'.repeat(254), warm_pool: 'c' }, /^name: /],
      [{ namespace: 'a', name: 'b', warm_pool: '-c' }, /^warm_pool: /],
      [{ namespace: 'a', name: 'b', warm_pool: 'c', ttl_seconds: -1 }, /ttl_seconds/],
      [{ namespace: 'a', name: 'b', warm_pool: 'c', ttl_seconds: 'x' }, /ttl_seconds/],
      [{ namespace: 'a', name: 'b', warm_pool: 'c', template: 't' }, /^unknown field "template"/],
    ];
    for (const [body, message] of cases)
      assert.throws(() => parseKubeClaim(body), badRequest(message), JSON.stringify(body));
  });

  it("carries a Sandbox named after the claim, and the delivery reads back from the node's claim table", () => {
    const req = parseKubeClaim({ namespace: 'team-a', name: 'my-claim', warm_pool: 'py' });
    const pool: ResolvedPool = {
      key: { template: 'sandbox/minimal', net: 'none', size: 'small' },
      template: 'py-tpl',
      podTemplate: { spec: { containers: [{ name: 'main', image: 'sandbox/minimal' }] } },
    };
    const object = sandboxObject(req, pool, 'system:serviceaccount:team-a:claimer');
    assert.equal(object.metadata.name, 'my-claim');
    assert.equal(object.metadata.namespace, 'team-a');
    assert.match(object.metadata.uid, /^[0-9a-f-]{36}$/);
    assert.deepEqual(object.spec.podTemplate, pool.podTemplate);
    const rec = {
      id: 'sb_0123456789abcdef',
      claimedAt: '2026-12-01T10:00:00.000Z',
      object: JSON.parse(JSON.stringify(object)),
      gatewayDelivery: deliveryFact(req, pool, 'system:serviceaccount:team-a:claimer'),
    } as SandboxRecord;
    assert.deepEqual(deliveryOf(rec), {
      id: 'sb_0123456789abcdef',
      namespace: 'team-a',
      name: 'my-claim',
      warmPool: 'py',
      template: 'py-tpl',
      user: 'system:serviceaccount:team-a:claimer',
      claimedAtMs: Date.parse('2026-12-01T10:00:00.000Z'),
    });
    // Whatever its object says, a claim the gateway did not make is not the gateway's to record, adopt or release:
    // an object carrying the gateway's annotations word for word (a root claim, a fork) is not a delivery.
    const { gatewayDelivery: _fact, ...notTheGateways } = rec;
    assert.equal(deliveryOf(notTheGateways), undefined);
    assert.equal(deliveryOf({ ...notTheGateways, tenant: 'acme', source: 'warm' }), undefined);
    assert.equal(deliveryOf({ ...notTheGateways, object: undefined }), undefined);
    // An older node's own delivery (no fact yet: a kubernetes: tenant's pool claim of the object's name) still is.
    const legacy = { ...notTheGateways, tenant: 'kubernetes:system:serviceaccount:team-a:claimer', source: 'warm' };
    assert.deepEqual(deliveryOf({ ...legacy, claimRef: 'team-a/my-claim' } as SandboxRecord), deliveryOf(rec));
    assert.equal(deliveryOf({ ...legacy, claimRef: 'team-a/my-claim', source: 'fork' } as SandboxRecord), undefined);
  });
});

describe('claim gateway ledger', () => {
  const dir = mkdtempSync(join(tmpdir(), 'gw-ledger-'));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('keeps which claim UID each delivery was recorded for across a restart, 0600', async () => {
    const path = join(dir, 'claim-gateway.json');
    const a = new DeliveryLedger(path, silentLogger);
    a.load();
    assert.equal(a.claimUid('sb_1'), undefined, 'no file: empty');
    a.set('sb_1', 'uid-1');
    a.set('sb_2', 'uid-2');
    a.set('sb_3', 'uid-1');
    a.delete('sb_2');
    await a.flush();
    assert.equal(statSync(path).mode & 0o777, 0o600);

    const b = new DeliveryLedger(path, silentLogger);
    b.load();
    assert.equal(b.claimUid('sb_1'), 'uid-1');
    assert.equal(b.claimUid('sb_2'), undefined);
    assert.deepEqual(b.idsFor('uid-1').sort(), ['sb_1', 'sb_3']);
    b.retain((id) => id !== 'sb_3');
    await b.flush();
    assert.deepEqual(JSON.parse(readFileSync(path, 'utf8')), { recorded: { sb_1: 'uid-1' } });
  });

  it('refuses a corrupt file (an empty ledger would bring deleted claims back)', () => {
    const path = join(dir, 'corrupt.json');
    writeFileSync(path, '{"recorded": ');
    assert.throws(
      () => new DeliveryLedger(path, silentLogger).load(),
      (err: unknown) =>
        err instanceof SandboxError &&
        err.code === 'sandboxd.state' &&
        /not valid JSON/.test(err.message) &&
        /move it aside/.test(err.hint ?? ''),
    );
  });
});
