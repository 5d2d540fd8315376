/**
 * The e2b router's auto-resume (src/apiserver/e2b/auto-resume.ts) in-process, against a node API that counts its
 * resume verbs and can be told to fail or be slow: what no real VM can show deterministically. Concurrent requests
 * (plain and upgrades) to one paused sandbox cause one resume at the node; a failed resume is the SDK's 502
 * `{code, message}` saying why; an unauthenticated request, or any request to a sandbox without autoResume, is
 * forwarded as before without a resume; the lease after it is the create's timeout, at least 300 s. The real
 * router, SandboxOps and store run; only the node (its API and its data-plane listener) is a stand-in. The whole
 * path with real VMs and the real SDKs: test/aggregated/e2b-auto-resume.test.ts.
 */
import assert from 'node:assert/strict';
import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, beforeEach, describe, it } from 'node:test';
import { Registry } from 'prom-client';
import { envdAccessToken, fileSignature, trafficAccessToken } from '../../src/api/envd.js';
import { CocoonAnnotationKeys, E2B_PUBLIC_TRAFFIC_ANNOTATION } from '../../src/api/keys.js';
import { AutoResumer } from '../../src/apiserver/e2b/auto-resume.js';
import { SandboxRouter } from '../../src/apiserver/e2b/router.js';
import { SandboxOps, type OpsDeps } from '../../src/apiserver/e2b/sandbox-ops.js';
import { E2B_ANNOTATIONS } from '../../src/apiserver/e2b/views.js';
import type { NodeRow } from '../../src/apiserver/sandboxes/entry.js';
import { EventLog } from '../../src/apiserver/sandboxes/event-log.js';
import { NodeHttpError, type SandboxdClient } from '../../src/apiserver/sandboxes/sandboxd-client.js';
import { SandboxStore } from '../../src/apiserver/sandboxes/store.js';
import { silentLogger } from '../../src/log/logger.js';
import { rawGet } from '../support/aggregated.js';

const NS = 'e2b';
const NODE = 'node-a';
const NODE_ADDR = '127.0.0.1:1';
const SANDBOX_TOKEN = 'sandboxd-token-of-the-claim';
const ENVD_TOKEN = envdAccessToken(SANDBOX_TOKEN);

/** The node: its rows, its resume verbs counted, a resume made slow or failing on demand. */
class FakeNode {
  rows = new Map<string, NodeRow>();
  resumes = 0;
  renewals: number[] = [];
  resumeDelayMs = 150;
  failResume: string | undefined;
  /** Someone else resumes it first: the node's row is Running and our resume is refused "it is running". */
  resumedByOther = false;
  private rv = 1;

  add(name: string, annotations: Record<string, string>, phase: 'Paused' | 'Running' = 'Paused'): NodeRow {
    const row: NodeRow = {
      id: `claim-${name}`,
      key: { template: 'sandbox/base', net: 'none', size: 'small' },
      deadline: new Date(Date.now() + 86_400_000).toISOString(),
      claimed_at: new Date().toISOString(),
      hibernated: false,
      phase,
      rv: this.rv++,
      claim_ref: `${NS}/${name}`,
      object: {
        metadata: { name, namespace: NS, uid: `uid-${name}`, creationTimestamp: new Date().toISOString(), annotations },
        spec: { podTemplate: { spec: { containers: [{ name: 'sandbox', image: 'sandbox/base' }] } } },
      } as NodeRow['object'],
    };
    this.rows.set(row.id, row);
    return row;
  }

  private bump(row: NodeRow, change: Partial<NodeRow>): NodeRow {
    const next = { ...row, ...change, rv: this.rv++ };
    this.rows.set(row.id, next);
    return next;
  }

  readonly client = {
    call: async (_node: string, _addr: string, method: string, path: string, body?: unknown): Promise<unknown> => {
      if (method === 'GET' && path === '/v1/info') return { envd_addr: envdAddr };
      const m = /^\/v1\/sandboxes\/([^/]+)(?:\/(resume|renew))?$/.exec(path);
      const row = m ? this.rows.get(decodeURIComponent(m[1]!)) : undefined;
      if (!m || !row) throw new NodeHttpError(NODE, 404, `no sandbox at ${path}`);
      if (method === 'GET' && !m[2]) return { ...row, token: SANDBOX_TOKEN };
      if (method === 'POST' && m[2] === 'resume') {
        this.resumes++;
        await new Promise((r) => setTimeout(r, this.resumeDelayMs));
        if (this.failResume) throw new NodeHttpError(NODE, 500, this.failResume);
        if (this.resumedByOther) {
          this.bump(row, { phase: 'Running' });
          throw new NodeHttpError(NODE, 409, 'cannot resume VM: it is running');
        }
        return { sandbox: this.bump(row, { phase: 'Running' }) };
      }
      if (method === 'POST' && m[2] === 'renew') {
        const ttl = (body as { ttl_seconds: number }).ttl_seconds;
        this.renewals.push(ttl);
        this.bump(row, { deadline: new Date(Date.now() + ttl * 1000).toISOString() });
        return {};
      }
      throw new NodeHttpError(NODE, 405, `${method} ${path}`);
    },
  };
}

let envdAddr = '';
/** The node's data plane: answers every request with what it was asked, and counts them. */
let envd: Server;
let envdSeen: string[] = [];

/** A GET to the router with the headers given (a Host of our choosing, say). */
function get(
  port: number,
  headers: Record<string, string>,
  path = '/health',
): Promise<{ status: number; body: string }> {
  return rawGet(`http://127.0.0.1:${port}${path}`, headers);
}

/** An upgrade through the router: the status line the client got (101 when spliced through to the node). */
function upgrade(port: number, headers: Record<string, string>): Promise<string> {
  return new Promise((resolve, reject) => {
    const r = request({
      host: '127.0.0.1',
      port,
      path: '/ws',
      headers: { connection: 'Upgrade', upgrade: 'echo', ...headers },
    });
    r.on('upgrade', (res, socket) => {
      socket.destroy();
      resolve(String(res.statusCode));
    });
    r.on('response', (res) => {
      res.resume();
      resolve(String(res.statusCode));
    });
    r.on('error', reject);
    r.end();
  });
}

describe('e2b router: auto-resume of a paused sandbox on a request', () => {
  let node: FakeNode;
  let store: SandboxStore;
  let router: SandboxRouter;
  let registry: Registry;
  let resumer: AutoResumer;
  let port = 0;

  before(async () => {
    envd = createServer((req, res) => {
      envdSeen.push(`${req.headers['e2b-sandbox-id']}:${req.url}`);
      res.writeHead(200, { 'content-type': 'text/plain' }).end('served by the node');
    });
    envd.on('upgrade', (req, socket) => {
      envdSeen.push(`${req.headers['e2b-sandbox-id']}:upgrade`);
      socket.end('HTTP/1.1 101 Switching Protocols\r\nupgrade: echo\r\nconnection: Upgrade\r\n\r\n');
    });
    await new Promise<void>((r) => envd.listen(0, '127.0.0.1', r));
    envdAddr = `127.0.0.1:${(envd.address() as AddressInfo).port}`;
  });
  after(async () => {
    await router?.close();
    await new Promise<void>((r) => envd.close(() => r()));
  });

  beforeEach(async () => {
    await router?.close();
    node = new FakeNode();
    envdSeen = [];
    store = new SandboxStore(silentLogger, new EventLog(64));
    registry = new Registry();
    const client = node.client as unknown as SandboxdClient;
    const ops = new SandboxOps({ store, client, namespace: NS, log: silentLogger } as unknown as OpsDeps);
    router = new SandboxRouter({
      store,
      client,
      namespace: NS,
      logger: silentLogger,
      autoResume: (resumer = new AutoResumer({ ops, logger: silentLogger, registry })),
    });
    port = (await router.listen('127.0.0.1', 0)).port;
  });

  const sandbox = (name: string, autoResume: boolean, extra: Record<string, string> = {}) => {
    const row = node.add(name, {
      [CocoonAnnotationKeys.ttlSeconds]: '600',
      ...(autoResume ? { [E2B_ANNOTATIONS.autoResume]: 'true' } : {}),
      ...extra,
    });
    store.upsert(NODE, NODE_ADDR, row);
    return row;
  };
  const counted = async () => {
    const m = await registry.getSingleMetricAsString('sandbox_apiserver_e2b_auto_resumes_total');
    return Number(/result="resumed"} (\d+)/.exec(m)?.[1] ?? 0);
  };

  it('concurrent requests (plain and upgrades) cause one resume at the node, then all are served', async () => {
    const row = sandbox('ia', true, { [E2B_PUBLIC_TRAFFIC_ANNOTATION]: 'true' });
    const h = { 'e2b-sandbox-id': 'ia', 'x-access-token': ENVD_TOKEN };
    const out = await Promise.all([
      get(port, h),
      get(port, h, '/files?path=x'),
      get(port, h),
      upgrade(port, { 'e2b-sandbox-id': 'ia', 'e2b-sandbox-port': '8080' }),
      upgrade(port, { ...h, 'e2b-sandbox-port': '8080' }),
    ]);
    assert.deepEqual(
      out.map((r) => (typeof r === 'string' ? r : `${r.status} ${r.body}`)),
      ['200 served by the node', '200 served by the node', '200 served by the node', '101', '101'],
    );
    assert.equal(node.resumes, 1, 'one resume at the node for five requests');
    assert.equal(await counted(), 1);
    assert.equal(store.get(`${NS}/ia`)?.phase, 'Running');
    // The lease again: the create's 600 s (above e2b's 300 s floor), from now.
    assert.deepEqual(node.renewals, [600]);
    assert.equal(envdSeen.length, 5);
    assert.ok(
      envdSeen.every((s) => s.startsWith(`${row.id}:`)),
      envdSeen.join(' '),
    );
    // Once running, a request is forwarded with no further node call; no resume is left pending.
    assert.equal((await get(port, h)).status, 200);
    assert.equal(node.resumes, 1);
    assert.equal(resumer.pending, 0);
  });

  it('a short create timeout resumes with 300 s, as e2b', async () => {
    const row = node.add('ib', { [CocoonAnnotationKeys.ttlSeconds]: '30', [E2B_ANNOTATIONS.autoResume]: 'true' });
    store.upsert(NODE, NODE_ADDR, row);
    assert.equal((await get(port, { 'e2b-sandbox-id': 'ib', 'x-access-token': ENVD_TOKEN })).status, 200);
    assert.deepEqual(node.renewals, [300]);
  });

  it("a resume that fails is the SDK's 502 {code, message} saying why, for every waiting request", async () => {
    sandbox('ic', true);
    node.failResume = 'qemu: cannot restore memory';
    const h = { 'e2b-sandbox-id': 'ic', 'x-access-token': ENVD_TOKEN };
    const [a, b] = await Promise.all([get(port, h), get(port, h)]);
    for (const r of [a, b]) {
      assert.equal(r.status, 502, r.body);
      const body = JSON.parse(r.body) as { code: number; message: string; sandboxId: string };
      assert.equal(body.code, 502);
      assert.equal(body.sandboxId, 'ic');
      assert.match(body.message, /paused and could not be resumed: .*HTTP 500: qemu: cannot restore memory/);
      assert.match(body.message, /Sandbox\.connect/);
    }
    assert.equal(node.resumes, 1, 'the two requests shared the one failed attempt');
    assert.equal(resumer.pending, 0, 'a failed resume is not kept');
    assert.deepEqual(envdSeen, [], 'nothing forwarded');
    // The next request tries again (a failure is not remembered).
    node.failResume = undefined;
    assert.equal((await get(port, h)).status, 200);
    assert.equal(node.resumes, 2);
  });

  it('a resume that loses a race with another resume (connect, another replica) still serves the request', async () => {
    sandbox('ih', true);
    node.resumedByOther = true;
    const r = await get(port, { 'e2b-sandbox-id': 'ih', 'x-access-token': ENVD_TOKEN });
    assert.equal(r.status, 200, r.body);
    assert.equal(node.resumes, 1);
    assert.equal(await counted(), 0, 'counted as found running, not as resumed');
  });

  it('what does not resume: no token, a wrong token, a private port without one, a sandbox without autoResume', async () => {
    sandbox('id', true);
    sandbox('ie', false);
    const tries = [
      get(port, { 'e2b-sandbox-id': 'id' }), // envd's tokenless /health
      get(port, { 'e2b-sandbox-id': 'id', 'x-access-token': 'wrong' }),
      get(port, { 'e2b-sandbox-id': 'id', 'e2b-sandbox-port': '8080' }), // not public: needs a token
      get(port, { 'e2b-sandbox-id': 'id', 'e2b-sandbox-port': '8080', 'e2b-traffic-access-token': 'nope' }),
      get(port, { 'e2b-sandbox-id': 'id' }, `/files?path=x&signature=v1_forged&signature_expiration=${2e9}`),
      upgrade(port, { 'e2b-sandbox-id': 'id', 'e2b-sandbox-port': '8080' }),
      get(port, { 'e2b-sandbox-id': 'ie', 'x-access-token': ENVD_TOKEN }),
    ];
    await Promise.all(tries);
    assert.equal(node.resumes, 0);
    assert.equal(await counted(), 0);
    // Forwarded as before: the node answers for a paused sandbox (here the stand-in saw them all).
    assert.equal(envdSeen.length, tries.length);
    assert.equal(store.get(`${NS}/id`)?.phase, 'Paused');
    assert.equal(store.get(`${NS}/ie`)?.phase, 'Paused');
  });

  it('a signed /files URL and the traffic token resume, as they would be served', async () => {
    sandbox('if', true);
    const exp = Math.floor(Date.now() / 1000) + 60;
    const sig = fileSignature('/home/user/a', 'read', 'user', ENVD_TOKEN, exp);
    const path = `/files?path=%2Fhome%2Fuser%2Fa&username=user&signature=${encodeURIComponent(sig)}&signature_expiration=${exp}`;
    assert.equal((await get(port, { 'e2b-sandbox-id': 'if' }, path)).status, 200);
    assert.equal(node.resumes, 1);
    sandbox('ig', true);
    const traffic = { 'e2b-traffic-access-token': trafficAccessToken(ENVD_TOKEN) };
    assert.equal((await get(port, { 'e2b-sandbox-id': 'ig', 'e2b-sandbox-port': '8080', ...traffic })).status, 200);
    assert.equal(node.resumes, 2);
  });
});
