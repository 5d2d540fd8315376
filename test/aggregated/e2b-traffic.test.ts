/**
 * Guest ports through the e2b router on the real aggregated platform (issue 28): a sandbox created through the e2b
 * API with `network.allowPublicTraffic: false` gets a `trafficAccessToken` in the create answer, and an HTTP server
 * inside it answers through the router only to a request carrying that token (or the envd access token); one
 * created with the default options is marked public by the server (annotation e2b.dev/public-traffic) and answers
 * without a token; a Kubernetes client cannot set that annotation itself.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Sandbox } from 'e2b';
import {
  e2bOptions,
  getAggregated,
  rawGet,
  sandboxManifest,
  whileE2bBusy,
  type AggregatedEnv,
} from '../support/aggregated.js';
import { eventually } from '../support/eventually.js';

const PUBLIC_TRAFFIC = 'e2b.dev/public-traffic';
/** Where the test's HTTP server listens inside the guest (any port but envd's 49983). */
const PORT = 8080;

let env: AggregatedEnv;
const opts = () => e2bOptions(env);
const created: string[] = [];

/** POST /v2/sandboxes with a raw body: the create answer as the server wrote it. */
async function createRaw(body: Record<string, unknown>): Promise<Record<string, unknown>> {
  return whileE2bBusy(async () => {
    const res = await fetch(`${env.e2b.apiUrl}/v2/sandboxes`, {
      method: 'POST',
      headers: { 'x-api-key': env.e2b.apiKey, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    const text = await res.text();
    if (res.status !== 201) throw new Error(`create answered ${res.status}: ${text}`);
    const answer = JSON.parse(text) as Record<string, unknown>;
    created.push(answer.sandboxID as string);
    return answer;
  });
}

/** A GET through the router to a guest port: by the E2b-Sandbox-Id/-Port headers, or by Host when one is given. */
function viaRouter(
  id: string,
  headers: Record<string, string> = {},
  host?: string,
): Promise<{ status: number; body: string }> {
  const route: Record<string, string> = host ? { host } : { 'e2b-sandbox-id': id, 'e2b-sandbox-port': String(PORT) };
  return rawGet(`${env.e2b.sandboxUrl}/index.html`, { ...route, ...headers });
}

/** busybox httpd inside the guest on PORT, serving a page that names the sandbox. */
async function serve(sbx: Sandbox): Promise<string> {
  const page = `hello from ${sbx.sandboxId}`;
  await sbx.commands.run(`mkdir -p /tmp/www && echo '${page}' > /tmp/www/index.html`);
  // sandbox/base keeps busybox out of PATH (the initramfs' copy is at /.sbx/busybox).
  await sbx.commands.run(`exec "$(command -v busybox || echo /.sbx/busybox)" httpd -f -p ${PORT} -h /tmp/www`, {
    background: true,
    timeoutMs: 0,
  });
  return `${page}\n`;
}

async function annotations(id: string): Promise<Record<string, string>> {
  const obj = JSON.parse(await env.kubectl(['get', 'sandbox', id, '-n', env.e2b.namespace, '-o', 'json'])) as {
    metadata: { annotations?: Record<string, string> };
  };
  return obj.metadata.annotations ?? {};
}

describe('e2b guest ports: public traffic and the traffic access token', () => {
  before(async () => {
    env = await getAggregated();
  });
  after(async () => {
    await Promise.allSettled(created.map((id) => Sandbox.kill(id, opts())));
  });

  it('allowPublicTraffic false: the answer carries trafficAccessToken, and a port answers only with a token', async () => {
    const answer = await createRaw({ templateID: 'base', timeout: 300, network: { allowPublicTraffic: false } });
    const id = answer.sandboxID as string;
    const traffic = answer.trafficAccessToken;
    const envdToken = answer.envdAccessToken as string;
    assert.equal(typeof traffic, 'string', JSON.stringify(answer));
    assert.ok((traffic as string).length > 0);
    assert.ok(envdToken);
    assert.notEqual(traffic, envdToken, 'the traffic token is not the envd token');
    assert.equal((await annotations(id))[PUBLIC_TRAFFIC], undefined, 'not marked public');

    const sbx = await Sandbox.connect(id, opts());
    assert.equal(sbx.trafficAccessToken, traffic, 'connect hands the SDK the same token');
    const page = await serve(sbx);
    const withToken = { 'e2b-traffic-access-token': traffic as string };
    const ok = await eventually(() => viaRouter(id, withToken), {
      until: (r) => r.status === 200,
      timeoutMs: 30_000,
      what: `the guest's port ${PORT} with the traffic token`,
    });
    assert.equal(ok.body, page);

    const none = await viaRouter(id);
    assert.equal(none.status, 401, none.body);
    assert.doesNotMatch(none.body, /hello from/);
    assert.match((JSON.parse(none.body) as { message: string }).message, /E2B-Traffic-Access-Token/);
    // The same by host, as sbx.getHost(port) names it.
    const host = sbx.getHost(PORT);
    assert.match(host, new RegExp(`^${PORT}-${id}\\.`));
    assert.equal((await viaRouter(id, {}, host)).status, 401);
    const byHost = await viaRouter(id, withToken, host);
    assert.equal(byHost.status, 200, byHost.body);
    assert.equal(byHost.body, page);
    // A wrong token, or the envd token in the traffic header, is no token; the envd token in its own header is.
    assert.equal((await viaRouter(id, { 'e2b-traffic-access-token': `${traffic as string}x` })).status, 401);
    assert.equal((await viaRouter(id, { 'e2b-traffic-access-token': envdToken })).status, 401);
    assert.equal((await viaRouter(id, { 'x-access-token': 'wrong' })).status, 401);
    const withEnvd = await viaRouter(id, { 'x-access-token': envdToken });
    assert.equal(withEnvd.status, 200, withEnvd.body);
    assert.equal(withEnvd.body, page);
  });

  it('a sandbox created with the default options is public: its port answers without a token', async () => {
    const sbx = await whileE2bBusy(() => Sandbox.create('base', { ...opts(), timeoutMs: 300_000 }));
    created.push(sbx.sandboxId);
    assert.equal(sbx.trafficAccessToken, undefined, 'no traffic token for a public sandbox');
    assert.equal((await annotations(sbx.sandboxId))[PUBLIC_TRAFFIC], 'true');
    const page = await serve(sbx);
    const ok = await eventually(() => viaRouter(sbx.sandboxId), {
      until: (r) => r.status === 200,
      timeoutMs: 30_000,
      what: `the guest's port ${PORT} without a token`,
    });
    assert.equal(ok.body, page);
    const byHost = await viaRouter(sbx.sandboxId, {}, sbx.getHost(PORT));
    assert.equal(byHost.status, 200, byHost.body);
    assert.equal(byHost.body, page);
    // The raw answer of a public create says so too: no token.
    const answer = await createRaw({ templateID: 'base', timeout: 60, network: { allowPublicTraffic: true } });
    assert.equal(answer.trafficAccessToken, null, JSON.stringify(answer));
    assert.equal((await annotations(answer.sandboxID as string))[PUBLIC_TRAFFIC], 'true');
  });

  it('a Kubernetes client cannot mark a sandbox public: the annotation is refused on create', async () => {
    const manifest = sandboxManifest('forged-public', { annotations: { [PUBLIC_TRAFFIC]: 'true' } });
    try {
      await assert.rejects(
        env.kubectl(['create', '-n', env.e2b.namespace, '-f', '-'], JSON.stringify(manifest)),
        (err: Error) =>
          /metadata\.annotations\[e2b\.dev\/public-traffic\]/.test(err.message) &&
          /Forbidden: set by the server/.test(err.message),
      );
    } finally {
      await env.kubectl(['delete', 'sandbox', 'forged-public', '-n', env.e2b.namespace, '--ignore-not-found']);
    }
  });
});
