import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { syncBuiltinESMExports } from 'node:module';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it, mock } from 'node:test';
import { defaultRunRoot, NodeEngine } from '../../src/sandboxd/engine.js';
import { readEngineState } from '../../src/sandboxd/engine-state.js';
import { silentLogger } from '../../src/log/logger.js';
import { connect } from 'node:net';
import { ClaimGateway } from '../../src/sandboxd/claim-gateway.js';
import { SandboxdApi } from '../../src/sandboxd/http-api.js';
import { eventually } from '../support/eventually.js';
import { call as callApi, SandboxdProcess } from '../support/sandboxd-daemon.js';

const ROOT = 'root-token-for-tests';
const TENANT = 'tenant-token-for-tests';
const OTHER_TENANT = 'other-tenant-token-for-tests';
const TENANTS = new Map([
  [TENANT, 'acme'],
  [OTHER_TENANT, 'globex'],
]);
const KEY = { template: 'sandbox/minimal', net: 'none', size: 'small' } as const;

function call(base: string, method: string, path: string, body?: unknown, token: string | null = ROOT) {
  return callApi(base, method, path, body, token);
}

describe('sandboxd HTTP API (real microVMs, in-process engine)', () => {
  let dir: string;
  let engine: NodeEngine;
  let api: SandboxdApi;
  let base: string;
  let gateway: ClaimGateway;
  let gwPort: number;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sbxd-'));
    engine = new NodeEngine({ dataDir: dir, nodeName: 'test-node', advertiseAddr: '127.0.0.1:7777', maxClaims: 3 });
    await engine.start();
    api = new SandboxdApi({ engine, auth: { rootToken: ROOT, tenants: TENANTS, allowAnonymous: false } });
    const a = await api.listen('127.0.0.1', 0);
    base = `http://127.0.0.1:${a.port}`;
    gateway = new ClaimGateway({ api, auth: { rootToken: ROOT, tenants: TENANTS, allowAnonymous: false } });
    gwPort = (await gateway.listen('127.0.0.1', 0)).port;
  });

  after(async () => {
    await gateway?.close();
    await api?.close();
    await engine?.close({ destroyVms: true });
    await rm(dir, { recursive: true, force: true });
  });

  it('PUT /v1/pools fills the hot pool by cloning; GET /v1/info reports it', async () => {
    const put = await call(base, 'PUT', '/v1/pools', { pools: [{ ...KEY, warm: 2 }] });
    assert.equal(put.status, 200);
    const info = await eventually(async () => (await call(base, 'GET', '/v1/info')).json, {
      timeoutMs: 120_000,
      what: '2 warm VMs, both primed (their first command run ahead of any tenant)',
      until: (j) => {
        const p = (j.pools as Array<{ warm: number; primed: number }>)?.[0];
        return p?.warm === 2 && p.primed === 2;
      },
    });
    assert.deepEqual((info.pools as Array<{ key: unknown; target: number }>)[0]!.key, KEY);
  });

  it('a claim pops a running VM (warm), the VM answers exec, the pool refills, release destroys it', async () => {
    const claim = await call(
      base,
      'POST',
      '/v1/claim',
      { template: 'sandbox/minimal', claim_ref: 'ns/one', ttl_seconds: 60 },
      TENANT,
    );
    assert.equal(claim.status, 200, JSON.stringify(claim.json));
    const id = claim.json.id as string;
    assert.match(id, /^sb_[0-9a-f]{16}$/);
    assert.equal(claim.json.owner_addr, '127.0.0.1:7777');
    assert.ok(Date.parse(claim.json.deadline as string) > Date.now() + 50_000);
    assert.equal(engine.get(id)?.source, 'warm');
    const vmId = engine.get(id)!.vmId;
    // Both warm VMs were primed and one was taken; a refill clone cannot have been primed yet (it runs after
    // the refill delay, and priming waits for the refill to finish).
    const pool = (await call(base, 'GET', '/v1/info')).json.pools as Array<{ warm: number; primed: number }>;
    assert.equal(pool[0]!.primed, 1, JSON.stringify(pool));

    // The sandbox's own token may exec; another tenant token may not see it.
    const exec = await call(
      base,
      'POST',
      `/v1/sandboxes/${id}/exec`,
      { argv: ['sh', '-c', 'echo hello from $(uname -s)'] },
      claim.json.token as string,
    );
    assert.equal(exec.status, 200);
    assert.equal(exec.json.stdout, 'hello from Linux\n');
    assert.equal((await call(base, 'POST', `/v1/sandboxes/${id}/exec`, { argv: ['true'] }, TENANT)).status, 403);
    // A guest's refusal is the caller's to fix (agent.enoent, docs/errors.md), not a 500.
    const missing = await call(base, 'POST', `/v1/sandboxes/${id}/exec`, { argv: ['no-such-command'] });
    assert.equal(missing.status, 400, JSON.stringify(missing.json));
    assert.match(missing.json.error as string, /no-such-command.*not found/);
    // Arguments over the agent's 64 KiB request limit are refused before they reach the guest.
    const huge = await call(base, 'POST', `/v1/sandboxes/${id}/exec`, { argv: ['echo', 'x'.repeat(100 << 10)] });
    assert.equal(huge.status, 413, JSON.stringify(huge.json).slice(0, 200));

    const list = await call(base, 'GET', '/v1/sandboxes?claim_ref=ns/one');
    assert.equal((list.json.sandboxes as unknown[]).length, 1);
    assert.equal(
      (list.json.sandboxes as Array<Record<string, unknown>>)[0]!.token,
      undefined,
      'list never shows tokens',
    );

    await eventually(() => engine.warmCount(KEY), {
      timeoutMs: 60_000,
      until: (n) => n === 2,
      what: 'the pool to refill',
    });

    assert.equal(
      (await call(base, 'POST', `/v1/sandboxes/${id}/release`, undefined, claim.json.token as string)).status,
      204,
    );
    assert.equal((await call(base, 'POST', `/v1/sandboxes/${id}/release`)).status, 404);
    await eventually(async () => (await readdir(defaultRunRoot(dir))).includes(vmId), {
      until: (present) => !present,
      what: 'the VM run dir to go',
    });
  });

  it('bad input: missing/wrong token 401, tenant on operator routes 403, malformed bodies 400 naming the field', async () => {
    assert.deepEqual(await call(base, 'GET', '/v1/info', undefined, null), {
      status: 401,
      json: { error: 'invalid api token', code: 'sandboxd.unauthorized' },
    });
    assert.equal((await call(base, 'POST', '/v1/claim', { template: 'sandbox/minimal' }, 'wrong')).status, 401);
    assert.deepEqual(await call(base, 'GET', '/v1/info', undefined, TENANT), {
      status: 403,
      json: { error: 'operator token required', code: 'sandboxd.forbidden' },
    });
    assert.equal((await call(base, 'PUT', '/v1/pools', { pools: [] }, TENANT)).status, 403);

    const cases: Array<[string, string, unknown, RegExp]> = [
      ['POST', '/v1/claim', '{not json', /invalid request body/],
      ['POST', '/v1/claim', {}, /template: required/],
      ['POST', '/v1/claim', { template: 'sandbox/minimal', net: 'wifi' }, /net: must be one of/],
      ['POST', '/v1/claim', { template: 'sandbox/minimal', ttl_seconds: -5 }, /ttl_seconds: must be an integer/],
      ['POST', '/v1/claim', { template: 'no/such' }, /unknown template "no\/such"/],
      ['PUT', '/v1/pools', { pools: [{ ...KEY, warm: 1, extra: true }] }, /unknown field "extra"/],
      [
        'PUT',
        '/v1/pools',
        {
          pools: [
            { ...KEY, warm: 1 },
            { ...KEY, warm: 2 },
          ],
        },
        /duplicate pool/,
      ],
      ['PUT', '/v1/pools', { pools: [{ ...KEY, warm: -1 }] }, /warm: must be an integer >= 0/],
      ['POST', '/v1/claim', 'x'.repeat((1 << 20) + 10), /larger than/],
      ['GET', '/v1/sandboxes/%E0%A4%A', undefined, /invalid percent-encoding/],
    ];
    for (const [method, path, body, want] of cases) {
      const r = await call(base, method, path, body);
      assert.equal(r.status, 400, `${method} ${path} ${String(JSON.stringify(body)).slice(0, 60)} -> ${r.status}`);
      assert.match(String(r.json.error), want);
    }
    // Nothing was claimed by any of that.
    assert.equal(engine.claimedCount, 0);
  });

  it('claims beyond capacity get 429 and leave nothing behind', async () => {
    const ids = await claimMany(base, 3);
    const over = await call(base, 'POST', '/v1/claim', { template: 'sandbox/minimal' });
    assert.equal(over.status, 429);
    assert.match(String(over.json.error), /capacity/);
    assert.equal(engine.claimedCount, 3);
    for (const id of ids) assert.equal((await call(base, 'POST', `/v1/sandboxes/${id}/release`)).status, 204);
    assert.equal(engine.claimedCount, 0);
  });

  it('--allow-anonymous with tokens configured: a request without a token is nobody (401), not an operator', async () => {
    const both = new SandboxdApi({ engine, auth: { rootToken: ROOT, tenants: TENANTS, allowAnonymous: true } });
    const open = new SandboxdApi({ engine, auth: { rootToken: undefined, tenants: new Map(), allowAnonymous: true } });
    try {
      const bothUrl = `http://127.0.0.1:${(await both.listen('127.0.0.1', 0)).port}`;
      const openUrl = `http://127.0.0.1:${(await open.listen('127.0.0.1', 0)).port}`;
      // Bodies an operator would get a 400 for: nothing changes whichever answer comes back.
      const operatorRoutes: Array<[string, string, unknown]> = [
        ['GET', '/v1/info', undefined],
        ['GET', '/v1/sandboxes', undefined],
        ['GET', '/v1/checkpoints', undefined],
        ['GET', '/metrics', undefined],
        ['PUT', '/v1/pools', { pools: 'none' }],
        ['POST', '/v1/claim', { template: 'no/such' }],
      ];
      for (const [method, path, body] of operatorRoutes) {
        const r = await call(bothUrl, method, path, body, null);
        assert.equal(r.status, 401, `${method} ${path} without a token -> ${r.status} ${JSON.stringify(r.json)}`);
      }
      assert.equal((await call(bothUrl, 'GET', '/v1/info')).status, 200, 'the root token still works');
      assert.equal((await call(bothUrl, 'GET', '/healthz', undefined, null)).status, 200);
      // With no token configured at all, --allow-anonymous still opens the API (a throwaway local daemon).
      assert.equal((await call(openUrl, 'GET', '/v1/info', undefined, null)).status, 200);
    } finally {
      await both.close();
      await open.close();
    }
  });

  it('a sandbox token in the request body is compared in constant time', async () => {
    const claim = await call(base, 'POST', '/v1/claim', { template: 'sandbox/minimal' }, TENANT);
    assert.equal(claim.status, 200, JSON.stringify(claim.json));
    const id = claim.json.id as string;
    const token = claim.json.token as string;
    // The same length as the real token, so only the comparison itself can tell them apart.
    const guess = `${token.slice(0, -1)}${token.endsWith('A') ? 'B' : 'A'}`;
    const compared: string[] = [];
    const timingSafeEqual = crypto.timingSafeEqual;
    mock.method(crypto, 'timingSafeEqual', (a: NodeJS.ArrayBufferView, b: NodeJS.ArrayBufferView) => {
      compared.push(Buffer.from(a.buffer, a.byteOffset, a.byteLength).toString());
      compared.push(Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString());
      return timingSafeEqual(a, b);
    });
    syncBuiltinESMExports(); // the server's `import { timingSafeEqual }` now sees the spy
    try {
      const r = await call(base, 'POST', `/v1/sandboxes/${id}/fork`, { token: guess }, TENANT);
      assert.equal(r.status, 403, JSON.stringify(r.json));
    } finally {
      mock.restoreAll();
      syncBuiltinESMExports();
      assert.equal((await call(base, 'POST', `/v1/sandboxes/${id}/release`)).status, 204);
    }
    assert.ok(compared.includes(guess), 'the body token went through crypto.timingSafeEqual');
  });

  it('a tenant lists only the sandboxes it claimed; the root token lists all', async () => {
    const ids: Record<string, string> = {};
    try {
      for (const [who, token] of [
        ['acme', TENANT],
        ['globex', OTHER_TENANT],
        ['root', ROOT],
      ] as const) {
        const body = { template: 'sandbox/minimal', claim_ref: `ns/${who}` };
        const c = await call(base, 'POST', '/v1/claim', body, token);
        assert.equal(c.status, 200, JSON.stringify(c.json));
        ids[who] = c.json.id as string;
      }
      const listed = async (token: string, query = '') =>
        ((await call(base, 'GET', `/v1/sandboxes${query}`, undefined, token)).json.sandboxes as Array<{ id: string }>)
          .map((s) => s.id)
          .sort();
      assert.deepEqual(await listed(TENANT), [ids.acme]);
      assert.deepEqual(await listed(OTHER_TENANT), [ids.globex]);
      assert.deepEqual(await listed(OTHER_TENANT, '?claim_ref=ns/acme'), [], 'not by claim_ref either');
      assert.deepEqual(await listed(ROOT), Object.values(ids).sort());
    } finally {
      for (const id of Object.values(ids))
        assert.equal((await call(base, 'POST', `/v1/sandboxes/${id}/release`)).status, 204);
    }
  });

  it('the claim gateway serves POST /v1/claim like the API: same answers, auth, limits; nothing else', async () => {
    const gw = `http://127.0.0.1:${gwPort}`;
    const ok = await call(gw, 'POST', '/v1/claim', { template: 'sandbox/minimal', claim_ref: 'ns/gw' }, TENANT);
    assert.equal(ok.status, 200, JSON.stringify(ok.json));
    assert.match(ok.json.id as string, /^sb_[0-9a-f]{16}$/);
    assert.equal(engine.get(ok.json.id as string)?.claimRef, 'ns/gw');
    const exec = await call(
      base,
      'POST',
      `/v1/sandboxes/${ok.json.id}/exec`,
      { argv: ['true'] },
      ok.json.token as string,
    );
    assert.equal(exec.status, 200, 'the token minted through the gateway works on the API');

    const bad: Array<[string, string, unknown, string | null, number, RegExp]> = [
      ['POST', '/v1/claim', { template: 'sandbox/minimal' }, null, 401, /invalid api token/],
      ['POST', '/v1/claim', { template: 'sandbox/minimal' }, 'wrong', 401, /invalid api token/],
      ['POST', '/v1/claim', '{not json', ROOT, 400, /invalid request body/],
      ['POST', '/v1/claim', '[1]', ROOT, 400, /not an object/],
      ['POST', '/v1/claim', {}, ROOT, 400, /template: required/],
      ['POST', '/v1/claim', { template: 'no/such' }, ROOT, 400, /unknown template "no\/such"/],
      ['POST', '/v1/claim', 'x'.repeat((1 << 20) + 10), ROOT, 400, /larger than/],
      ['GET', '/v1/claim', undefined, ROOT, 405, /not allowed/],
      ['GET', '/v1/info', undefined, ROOT, 404, /only POST \/v1\/claim/],
    ];
    for (const [method, path, body, token, status, want] of bad) {
      const r = await call(gw, method, path, body, token);
      assert.equal(r.status, status, `${method} ${path} ${String(body).slice(0, 30)} -> ${r.status}`);
      assert.match(String(r.json.error), want);
    }
    assert.equal(engine.claimedCount, 1, 'no bad request claimed anything');

    // Two pipelined requests on one connection (the second chunked) are answered in order.
    const body = JSON.stringify({ template: 'no/such' });
    const pipelined = await rawExchange(
      gwPort,
      `POST /v1/claim HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${ROOT}\r\ncontent-length: ${body.length}\r\n\r\n${body}` +
        `POST /v1/claim HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${ROOT}\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n`,
      (got) => (got.match(/HTTP\/1\.1 /g) ?? []).length === 2 && /template: required/.test(got),
    );
    assert.match(pipelined, /^HTTP\/1\.1 400 [^]*unknown template[^]*HTTP\/1\.1 400 [^]*template: required/);
    // An answer known at once (a bad request) never overtakes one still being made (a miss, which clones a VM).
    assert.equal((await call(base, 'PUT', '/v1/pools', { pools: [{ ...KEY, warm: 0 }] })).status, 200);
    const miss = JSON.stringify({ template: 'sandbox/minimal' });
    const ordered = await rawExchange(
      gwPort,
      `POST /v1/claim HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${ROOT}\r\ncontent-length: ${miss.length}\r\n\r\n${miss}` +
        `POST /v1/claim HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${ROOT}\r\ncontent-length: ${body.length}\r\n\r\n${body}`,
      (got) => (got.match(/HTTP\/1\.1 /g) ?? []).length === 2 && /unknown template/.test(got),
    );
    assert.match(ordered, /^HTTP\/1\.1 200 [^]*"id":"sb_[^]*HTTP\/1\.1 400 [^]*unknown template/);
    const provisioned = /"id":"(sb_[0-9a-f]+)"/.exec(ordered)![1]!;
    assert.equal(engine.get(provisioned)?.source, 'provisioned');
    assert.equal((await call(base, 'POST', `/v1/sandboxes/${provisioned}/release`)).status, 204);
    // Not HTTP at all: 400, then the connection is closed.
    const garbage = await rawExchange(gwPort, 'HELLO THERE\r\n\r\n');
    assert.match(garbage, /^HTTP\/1\.1 400 Bad Request[^]*malformed HTTP request/);

    // Capacity is the engine's: 3 claims at most, then 429.
    const more = await claimMany(gw, 2);
    const over = await call(gw, 'POST', '/v1/claim', { template: 'sandbox/minimal' });
    assert.equal(over.status, 429);
    for (const id of [ok.json.id as string, ...more])
      assert.equal((await call(base, 'POST', `/v1/sandboxes/${id}/release`)).status, 204);
    assert.equal(engine.claimedCount, 0);
  });
});

/** Claim `n` sandboxes of sandbox/minimal on `url`, one after another; each must succeed. Their ids. */
async function claimMany(url: string, n: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const r = await call(url, 'POST', '/v1/claim', { template: 'sandbox/minimal' });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    ids.push(r.json.id as string);
  }
  return ids;
}

/** Send raw bytes on one connection; resolve with everything the server sent once it closes or `until` matches. */
function rawExchange(port: number, bytes: string, until?: (got: string) => boolean): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = connect(port, '127.0.0.1', () => s.write(bytes));
    let got = '';
    s.on('data', (d: Buffer) => {
      got += d.toString();
      if (until?.(got)) {
        s.destroy();
        resolve(got);
      }
    });
    s.on('end', () => resolve(got));
    s.on('error', reject);
  });
}

describe('sandboxd survives kill -9: claimed VMs keep running and are re-adopted', () => {
  it('claimed VMs come back after a restart with their state, unclaimed ones are replaced, nothing leaks after shutdown', async () => {
    const daemon = await SandboxdProcess.create('restart-node', ROOT, { acme: TENANT, globex: OTHER_TENANT });
    const logs = daemon.logs;
    try {
      await daemon.start(['--pools', 'sandbox/minimal=2']);
      await eventually(async () => (await call(daemon.base, 'GET', '/v1/info')).json, {
        timeoutMs: 120_000,
        until: (j) => (j.pools as Array<{ warm: number }>)?.[0]?.warm === 2,
        what: 'warm pool',
      });
      const claim = await call(
        daemon.base,
        'POST',
        '/v1/claim',
        { template: 'sandbox/minimal', claim_ref: 'ns/survivor', ttl_seconds: 600 },
        TENANT,
      );
      assert.equal(claim.status, 200);
      const id = claim.json.id as string;
      await call(daemon.base, 'POST', `/v1/sandboxes/${id}/exec`, { argv: ['sh', '-c', 'echo kept > /tmp/marker'] });
      // The claim table is written off the claim path: wait until it names the claim, then crash.
      await eventually(async () => readEngineState(join(daemon.dataDir, 'state.json'), silentLogger).claims, {
        until: (claims) => claims.some((c) => c.id === id),
        what: 'the claim in the state file',
      });

      await daemon.kill();
      await daemon.start(['--destroy-on-exit']);
      const again = await call(daemon.base, 'POST', `/v1/sandboxes/${id}/exec`, { argv: ['cat', '/tmp/marker'] });
      assert.equal(again.status, 200, `${JSON.stringify(again.json)}\n${logs.join('')}`);
      assert.equal(again.json.stdout, 'kept\n', 'the same VM, with its state, after the restart');
      const info = await eventually(async () => (await call(daemon.base, 'GET', '/v1/info')).json, {
        timeoutMs: 60_000,
        until: (j) => (j.pools as Array<{ warm: number }>)?.[0]?.warm === 2,
        what: 'the pool to refill after the restart',
      });
      assert.equal(info.claimed, 1);
      // Which tenant made the claim is part of the saved record.
      const listedBy = async (token: string) =>
        (
          (await call(daemon.base, 'GET', '/v1/sandboxes', undefined, token)).json.sandboxes as Array<{ id: string }>
        ).map((s) => s.id);
      assert.deepEqual(await listedBy(TENANT), [id], 'the tenant still lists its claim after the restart');
      assert.deepEqual(await listedBy(OTHER_TENANT), [], 'and another tenant does not see it');
    } finally {
      await daemon.stop();
    }
    const left = await readdir(defaultRunRoot(daemon.dataDir)).catch(() => []);
    assert.deepEqual(left, [], 'no VM run dir left after --destroy-on-exit');
    await daemon.remove();
  });
});
