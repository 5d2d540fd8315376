/**
 * The aggregated API refuses what it must: users without RBAC (403, decided by SubjectAccessReview), requests that
 * reach the server directly without a front-proxy certificate or a token (401), and bad input (Status objects
 * with the right code and field causes, before any VM is spent); tokens never appear on reads.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { request } from 'node:https';
import { after, before, describe, it } from 'node:test';
import { aggregatedNamespace, getAggregated, sandboxManifest, type AggregatedEnv } from '../support/aggregated.js';

interface Reply {
  status: number;
  body: string;
  headers: Record<string, string | string[] | undefined>;
}

/** A request to kube-apiserver as the admin (or as `as` via impersonation), or straight to sandbox-apiserver. */
function call(
  env: AggregatedEnv,
  method: string,
  path: string,
  opts: {
    body?: string | Buffer;
    as?: string;
    direct?: boolean;
    cert?: { cert: string; key: string };
    token?: string;
    type?: string;
  } = {},
): Promise<Reply> {
  const c = env.cluster;
  const base = opts.direct ? `https://${env.apiserver.address}` : c.server;
  const ca = readFileSync(opts.direct ? env.apiserver.caFile : c.pki.ca.cert);
  const cert = opts.cert ?? (opts.direct || opts.token ? undefined : { cert: c.pki.admin.cert, key: c.pki.admin.key });
  const headers: Record<string, string | number> = { accept: 'application/json' };
  if (opts.as) headers['impersonate-user'] = opts.as;
  if (opts.token) headers.authorization = `Bearer ${opts.token}`;
  if (opts.body !== undefined) {
    headers['content-type'] = opts.type ?? 'application/json';
    headers['content-length'] = Buffer.byteLength(opts.body);
  }
  return new Promise((resolve, reject) => {
    const req = request(
      `${base}${path}`,
      { method, ca, ...(cert ? { cert: readFileSync(cert.cert), key: readFileSync(cert.key) } : {}), headers },
      (res) => {
        let body = '';
        res.on('data', (d: Buffer) => (body += d.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body, headers: res.headers }));
      },
    );
    req.on('error', reject);
    req.end(opts.body);
  });
}

const status = (r: Reply) =>
  JSON.parse(r.body) as {
    kind: string;
    code: number;
    reason: string;
    message: string;
    details?: { causes?: Array<{ field?: string }> };
  };

describe('aggregated sandboxes: security and bad input', () => {
  let env: AggregatedEnv;
  let ns: { name: string; cleanup(): Promise<void> };
  let base: string;
  before(async () => {
    env = await getAggregated();
    ns = await aggregatedNamespace('sec');
    base = `/apis/agents.x-k8s.io/v1beta1/namespaces/${ns.name}/sandboxes`;
    await env.kubectl([
      'create',
      'role',
      'getter',
      '-n',
      ns.name,
      '--verb=get',
      '--resource=sandboxes.agents.x-k8s.io',
    ]);
    await env.kubectl(['create', 'rolebinding', 'getter', '-n', ns.name, '--role=getter', '--user=only-get']);
  });
  after(async () => ns?.cleanup());

  it('403 for a user with no RBAC on list, create and delete', async () => {
    for (const [method, path, body] of [
      ['GET', base, undefined],
      ['POST', base, JSON.stringify(sandboxManifest('x'))],
      ['DELETE', `${base}/x`, undefined],
    ] as const) {
      const r = await call(env, method, path, { as: 'nobody', body });
      assert.equal(r.status, 403, `${method} ${path}: ${r.body}`);
      assert.equal(status(r).reason, 'Forbidden');
    }
  });

  it('a user allowed only get cannot create', async () => {
    const r = await call(env, 'POST', base, { as: 'only-get', body: JSON.stringify(sandboxManifest('y')) });
    assert.equal(r.status, 403, r.body);
    const g = await call(env, 'GET', `${base}/absent`, { as: 'only-get' });
    assert.equal(g.status, 404, 'get is allowed (and the sandbox does not exist)');
  });

  it('401 for a request straight to the server without a front-proxy certificate or token', async () => {
    const r = await call(env, 'GET', base, { direct: true });
    assert.equal(r.status, 401, r.body);
    const forged = await call(env, 'GET', base, { direct: true, token: 'not-a-token' });
    assert.equal(forged.status, 401, forged.body);
    // Identity headers without the front-proxy certificate are not trusted.
    const spoof = await new Promise<number>((resolve, reject) => {
      const req = request(
        `https://${env.apiserver.address}${base}`,
        {
          ca: readFileSync(env.apiserver.caFile),
          headers: { 'x-remote-user': 'admin', 'x-remote-group': 'system:masters' },
        },
        (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        },
      );
      req.on('error', reject);
      req.end();
    });
    assert.equal(spoof, 401);
    const health = await call(env, 'GET', '/readyz', { direct: true });
    assert.equal(health.status, 200, 'health needs no credentials');
  });

  /** Create a Sandbox as the admin, retried while the shared pools refill (capacity is not checked here). */
  const createNamed = async (name: string) => {
    let created = await call(env, 'POST', base, { body: JSON.stringify(sandboxManifest(name)) });
    for (let i = 0; created.status === 503 && i < 300; i++) {
      await new Promise((r) => setTimeout(r, 100));
      created = await call(env, 'POST', base, { body: JSON.stringify(sandboxManifest(name)) });
    }
    assert.equal(created.status, 201, created.body);
    return created;
  };

  it('never returns the token on get, list or watch', async () => {
    const created = await createNamed('tok');
    const token = JSON.parse(created.body).metadata.annotations['sandbox.cocoonstack.io/token'] as string;
    assert.ok(token);
    for (const path of [`${base}/tok`, base, `/apis/agents.x-k8s.io/v1beta1/sandboxes`]) {
      const r = await call(env, 'GET', path);
      assert.equal(r.status, 200);
      assert.ok(!r.body.includes(token), `token leaked on ${path}`);
    }
    const w = await env.kubectl(['get', '--raw', `${base}?watch=1&timeoutSeconds=1`]);
    assert.ok(w.includes('"tok"') && !w.includes(token), 'token leaked on watch');
  });

  it('a watch of one named Sandbox (RBAC resourceNames) streams that Sandbox alone', async () => {
    await createNamed('watched');
    await createNamed('unwatched');
    await env.kubectl([
      'create',
      'role',
      'one-watcher',
      '-n',
      ns.name,
      '--verb=watch,list',
      '--resource=sandboxes.agents.x-k8s.io',
      '--resource-name=watched',
    ]);
    await env.kubectl(['create', 'rolebinding', 'one-watcher', '-n', ns.name, '--role=one-watcher', '--user=one']);
    const watchPath = `/apis/agents.x-k8s.io/v1beta1/watch/namespaces/${ns.name}/sandboxes`;
    const named = await call(env, 'GET', `${watchPath}/watched?timeoutSeconds=1`, { as: 'one' });
    assert.equal(named.status, 200, named.body);
    const names = named.body
      .split('\n')
      .filter(Boolean)
      .map((l) => (JSON.parse(l) as { object: { metadata: { name: string } } }).object.metadata.name);
    assert.deepEqual(names, ['watched'], 'only the named Sandbox is streamed');
    // The same through the field selector kubectl sends for `get sandbox watched --watch`.
    const bySelector = await call(
      env,
      'GET',
      `${base}?watch=1&timeoutSeconds=1&fieldSelector=metadata.name%3Dwatched`,
      {
        as: 'one',
      },
    );
    assert.equal(bySelector.status, 200, bySelector.body);
    assert.ok(bySelector.body.includes('"watched"') && !bySelector.body.includes('"unwatched"'));
    const all = await call(env, 'GET', `${base}?watch=1&timeoutSeconds=1`, { as: 'one' });
    assert.equal(all.status, 403, "the collection is not this user's to watch");
    const mismatch = await call(
      env,
      'GET',
      `${watchPath}/watched?timeoutSeconds=1&fieldSelector=metadata.name%3Dunwatched`,
    );
    assert.equal(mismatch.status, 400, mismatch.body);
    assert.match(status(mismatch).message, /fieldSelector metadata.name doesn't match requested name/);
  });

  it('400 naming metadata.name when neither name nor generateName is given', async () => {
    const body = sandboxManifest('z') as { metadata: Record<string, unknown> };
    body.metadata = {};
    const r = await call(env, 'POST', base, { body: JSON.stringify(body) });
    assert.equal(r.status, 400, r.body);
    assert.ok(
      status(r).details?.causes?.some((c) => c.field === 'metadata.name'),
      r.body,
    );
  });

  it('503 naming the pool key when no node serves it, and nothing spent', async () => {
    const body = sandboxManifest('nopool') as {
      spec: { podTemplate: { spec: { containers: Array<{ image: string }> } } };
    };
    body.spec.podTemplate.spec.containers[0]!.image = 'sandbox/does-not-exist';
    const r = await call(env, 'POST', base, { body: JSON.stringify(body) });
    assert.equal(r.status, 503, r.body);
    assert.match(status(r).message, /template=sandbox\/does-not-exist/);
    assert.ok(r.headers['retry-after']);
  });

  it('400 for malformed JSON, 413 past 1 MiB, 415 for protobuf, 405 for PATCH, PUT and deletecollection', async () => {
    assert.equal((await call(env, 'POST', base, { body: '{"metadata": ' })).status, 400);
    const big = JSON.stringify({ ...sandboxManifest('big'), pad: 'x'.repeat(1.1 * (1 << 20)) });
    const tooBig = await call(env, 'POST', base, { body: big });
    assert.equal(tooBig.status, 413, tooBig.body.slice(0, 300));
    const proto = await call(env, 'POST', base, {
      body: Buffer.from([0x6b, 0x38, 0x73, 0]),
      type: 'application/vnd.kubernetes.protobuf',
    });
    assert.equal(proto.status, 415, proto.body);
    for (const [method, path] of [
      ['PATCH', `${base}/tok`],
      ['PUT', `${base}/tok`],
      ['DELETE', base],
    ] as const) {
      const r = await call(env, method, path, {
        body: '{}',
        type: method === 'PATCH' ? 'application/merge-patch+json' : 'application/json',
      });
      assert.equal(r.status, 405, `${method} ${path}: ${r.body}`);
      assert.equal(status(r).reason, 'MethodNotAllowed');
    }
  });

  it('rejects unknown fields under fieldValidation=Strict, warns under Warn', async () => {
    const body = JSON.stringify({
      ...sandboxManifest('strict'),
      spec: { ...sandboxManifest('strict').spec, bogus: 1 },
    });
    const strict = await call(env, 'POST', `${base}?fieldValidation=Strict`, { body });
    assert.equal(strict.status, 400, strict.body);
    assert.match(status(strict).message, /unknown field "spec.bogus"/);
    const warn = await call(env, 'POST', `${base}?fieldValidation=Warn&dryRun=All`, { body });
    assert.equal(warn.status, 201, warn.body);
    assert.match(String(warn.headers.warning), /unknown field/);
  });

  it('dryRun=All spends nothing', async () => {
    const r = await call(env, 'POST', `${base}?dryRun=All`, { body: JSON.stringify(sandboxManifest('dry')) });
    assert.equal(r.status, 201, r.body);
    assert.equal((await call(env, 'GET', `${base}/dry`)).status, 404);
  });
});
