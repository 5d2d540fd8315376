/**
 * `getHost(port)` on the local platform as `sbx up --layout aggregated` starts it (E2B_API_URL and E2B_SANDBOX_URL
 * set, no E2B_DOMAIN): the e2b API returns the domain `localhost:<router port>`, so the SDK (JS and Python) builds
 * `<port>-<id>.localhost:<router port>`, and curl, which resolves every `*.localhost` name to loopback itself
 * (RFC 6761), reaches a server inside the sandbox through the router at that URL. Node and Python resolve names
 * with glibc, which knows `*.localhost` only with nss-myhostname, so they send that Host to E2B_SANDBOX_URL instead.
 * docs/e2b.md "URLs the SDK builds".
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { Sandbox } from 'e2b';
import { e2bOptions, getAggregated, rawGet, whileE2bBusy, type AggregatedEnv } from '../support/aggregated.js';
import { pySdk, runPython } from '../support/e2b-sdks.js';
import { eventually } from '../support/eventually.js';

const run = promisify(execFile);
/** Where the test's server listens inside the guest (any port but envd's). */
const PORT = 8000;

let env: AggregatedEnv;
const created: Sandbox[] = [];

/** curl of a URL: the status and body (curl resolves `*.localhost` to loopback without asking the system). */
async function curl(url: string): Promise<{ status: number; body: string }> {
  const { stdout } = await run('curl', ['-sS', '--max-time', '10', '-w', '\n%{http_code}', url], { timeout: 20_000 });
  const i = stdout.lastIndexOf('\n');
  return { status: Number(stdout.slice(i + 1)), body: stdout.slice(0, i) };
}

describe('e2b getHost on the local platform', () => {
  before(async () => {
    env = await getAggregated();
  });
  after(async () => {
    await Promise.allSettled(created.map((s) => s.kill()));
  });

  it('getHost(port) is <port>-<id>.localhost:<router port>, and curl reaches the sandbox server at it', async () => {
    const routerPort = new URL(env.e2b.sandboxUrl).port;
    const sbx = await whileE2bBusy(() => Sandbox.create('base', { ...e2bOptions(env), timeoutMs: 300_000 }));
    created.push(sbx);
    const host = sbx.getHost(PORT);
    assert.equal(host, `${PORT}-${sbx.sandboxId}.localhost:${routerPort}`);
    // connect answers the same domain, and the Python SDK builds the same host from it.
    assert.equal((await Sandbox.connect(sbx.sandboxId, e2bOptions(env))).getHost(PORT), host);
    const py = (await runPython(
      await pySdk('2.63.0'),
      `import json, os\nfrom e2b import Sandbox\nprint(json.dumps(Sandbox.connect(os.environ["SBX_ID"]).get_host(${PORT})))`,
      {
        E2B_API_URL: env.e2b.apiUrl,
        E2B_SANDBOX_URL: env.e2b.sandboxUrl,
        E2B_API_KEY: env.e2b.apiKey,
        SBX_ID: sbx.sandboxId,
      },
    )) as string;
    assert.equal(py, host);

    const page = `served by ${sbx.sandboxId}`;
    await sbx.commands.run(`mkdir -p /tmp/www && echo '${page}' > /tmp/www/index.html`);
    await sbx.commands.run(`exec python3 -m http.server ${PORT} --bind 0.0.0.0 --directory /tmp/www`, {
      background: true,
      timeoutMs: 0,
    });
    const got = await eventually(() => curl(`http://${host}/index.html`), {
      until: (r) => r.status === 200,
      timeoutMs: 30_000,
      what: `curl http://${host}/index.html`,
    });
    assert.equal(got.body, `${page}\n`);
    // A client that cannot resolve *.localhost (Node, Python without nss-myhostname): the same Host to the router.
    const viaHeader = await rawGet(`${env.e2b.sandboxUrl}/index.html`, { host });
    assert.deepEqual([viaHeader.status, viaHeader.body], [200, `${page}\n`]);
  });
});
