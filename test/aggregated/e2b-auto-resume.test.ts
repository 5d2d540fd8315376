/**
 * e2b's auto-resume end to end (issue 31): the unmodified SDKs (npm e2b, pinned; PyPI e2b 2.63) create with
 * `lifecycle: {onTimeout: 'pause', autoResume: true}` against the aggregated layout with real microVMs, and a
 * request to the paused sandbox (a command, a file read, a WebSocket upgrade to a guest port) resumes it, with its
 * files, instead of failing; control-plane calls (getInfo, list) do not resume; a sandbox without autoResume, and a
 * request without the sandbox's token, still find it paused. Resumes are counted by sandbox-apiserver's
 * `sandbox_apiserver_e2b_auto_resumes_total`, which only this file's sandboxes move (none other has autoResume).
 * docs/e2b.md "Auto-resume".
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { request, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { Duplex } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { Sandbox, SandboxError } from 'e2b';
import { e2bOptions, getAggregated, whileE2bBusy, type AggregatedEnv } from '../support/aggregated.js';
import { pySdk, runPython } from '../support/e2b-sdks.js';
import { eventually } from '../support/eventually.js';

let env: AggregatedEnv;
const opts = () => e2bOptions(env);
const created: Sandbox[] = [];
/** Where the guest's echo server listens (a raw upgrade answered 101, then every byte echoed). */
const ECHO_PORT = 8081;
const RESUMING = { onTimeout: 'pause', autoResume: true } as const;

async function create(extra: Parameters<typeof Sandbox.create>[1] = {}): Promise<Sandbox> {
  const s = await whileE2bBusy(() => Sandbox.create('base', { ...opts(), ...extra }));
  created.push(s);
  return s;
}

/** Auto-resumes that resumed a sandbox, from sandbox-apiserver's /metrics. */
async function autoResumes(): Promise<number> {
  const ca = await readFile(env.apiserver.caFile);
  const [cert, key] = await Promise.all([readFile(env.cluster.pki.admin.cert), readFile(env.cluster.pki.admin.key)]);
  const text = await new Promise<string>((resolve, reject) => {
    const req = httpsRequest(`https://${env.apiserver.address}/metrics`, { ca, cert, key }, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve(body));
    });
    req.on('error', reject);
    req.end();
  });
  return Number(/sandbox_apiserver_e2b_auto_resumes_total\{result="resumed"\} (\d+)/.exec(text)?.[1] ?? 0);
}

/** A WebSocket-style upgrade through the router to the guest's echo server: the status, and the echo of `say`. */
function upgradeEcho(id: string, say: string): Promise<{ status: number; echo: string }> {
  return new Promise((resolve, reject) => {
    const url = new URL(env.e2b.sandboxUrl);
    const r = request({
      host: url.hostname,
      port: url.port,
      path: '/echo',
      headers: {
        connection: 'Upgrade',
        upgrade: 'echo',
        'e2b-sandbox-id': id,
        'e2b-sandbox-port': String(ECHO_PORT),
      },
      timeout: 120_000,
    });
    r.on('upgrade', (res: IncomingMessage, socket: Duplex, head: Buffer) => {
      let echo = head.toString();
      socket.on('data', (d: Buffer) => {
        echo += d.toString();
        if (echo.length >= say.length) {
          socket.destroy();
          resolve({ status: res.statusCode ?? 0, echo });
        }
      });
      socket.on('error', reject);
      socket.write(say);
    });
    r.on('response', (res) => {
      res.resume();
      resolve({ status: res.statusCode ?? 0, echo: '' });
    });
    r.on('error', reject);
    r.end();
  });
}

/** A server in the guest that answers any upgrade 101 and echoes what follows (python3: sandbox/base has it). */
const ECHO_SERVER = `
import socket, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", ${ECHO_PORT})); s.listen()
def serve(c):
    data = b""
    while b"\\r\\n\\r\\n" not in data:
        d = c.recv(4096)
        if not d: return c.close()
        data += d
    c.sendall(b"HTTP/1.1 101 Switching Protocols\\r\\nupgrade: echo\\r\\nconnection: Upgrade\\r\\n\\r\\n" + data.split(b"\\r\\n\\r\\n", 1)[1])
    while True:
        d = c.recv(4096)
        if not d: break
        c.sendall(d)
    c.close()
while True:
    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
`;

describe('e2b autoResume: a request to a paused sandbox resumes it (aggregated layout)', () => {
  const tag = `autoresume${Date.now()}`;
  /** Created with autoResume and a 600 s timeout; paused and resumed by the tests in turn. */
  let s: Sandbox;

  before(async () => {
    env = await getAggregated();
    s = await create({ timeoutMs: 600_000, metadata: { tag }, lifecycle: RESUMING });
  });
  after(async () => {
    await Promise.allSettled(created.map((x) => x.kill()));
  });

  it('JS SDK: after a pause, commands.run and files.read resume it with its files; getInfo and list do not', async (t) => {
    assert.deepEqual((await s.getInfo()).lifecycle, { onTimeout: 'pause', autoResume: true });
    await s.files.write('/home/user/kept.txt', 'written before the pause');
    assert.equal(await s.pause(), true);
    // Control-plane calls are not requests to the sandbox: it stays paused.
    assert.equal((await s.getInfo()).state, 'paused');
    const listed = await Sandbox.list({ ...opts(), query: { metadata: { tag } } }).nextItems();
    assert.deepEqual(
      listed.map((x) => x.state),
      ['paused'],
    );
    assert.equal((await s.getInfo()).state, 'paused');
    const before = await autoResumes();

    const t0 = performance.now();
    const r = await s.commands.run('cat /home/user/kept.txt');
    t.diagnostic(`a command on the paused sandbox, resume included: ${Math.round(performance.now() - t0)} ms`);
    assert.equal(r.stdout, 'written before the pause');
    assert.equal(await s.files.read('/home/user/kept.txt'), 'written before the pause');
    assert.equal(await s.isRunning(), true);
    const info = await s.getInfo();
    assert.equal(info.state, 'running');
    // The lease again: the create's 600 s from the resume (a pause holds it for 24 h), as e2b's auto-resume.
    const left = info.endAt.getTime() - Date.now();
    assert.ok(left > 480_000 && left <= 601_000, `lease left ${left} ms`);
    assert.equal((await autoResumes()) - before, 1);
  });

  it('concurrent requests to the paused sandbox cause one resume, and all are served', async () => {
    assert.equal(await s.pause(), true);
    const before = await autoResumes();
    const [run, read, entries] = await Promise.all([
      s.commands.run('echo one'),
      s.files.read('/home/user/kept.txt'),
      s.files.list('/home/user'),
      s.commands.run('echo two'),
    ]);
    assert.equal(run.stdout, 'one\n');
    assert.equal(read, 'written before the pause');
    assert.ok(
      entries.some((e) => e.name === 'kept.txt'),
      JSON.stringify(entries.map((e) => e.name)),
    );
    assert.equal((await autoResumes()) - before, 1, 'one resume for four requests');
    assert.equal((await s.getInfo()).state, 'running');
  });

  it('a WebSocket upgrade to a guest port resumes it; the guest server kept running through the pause', async () => {
    await s.commands.run(`cat > /tmp/echo.py <<'EOF'\n${ECHO_SERVER}\nEOF`);
    await s.commands.run('python3 /tmp/echo.py', { background: true, timeoutMs: 0 });
    const running = await eventually(() => upgradeEcho(s.sandboxId, 'ping'), {
      until: (x) => x.status === 101,
      timeoutMs: 30_000,
      what: 'the guest echo server',
    });
    assert.equal(running.echo, 'ping');
    assert.equal(await s.pause(), true);
    const before = await autoResumes();
    const woke = await upgradeEcho(s.sandboxId, 'pong after the pause');
    assert.deepEqual(woke, { status: 101, echo: 'pong after the pause' });
    assert.equal((await autoResumes()) - before, 1);
    assert.equal(await s.isRunning(), true);
  });

  it('without autoResume a paused sandbox still refuses; a request without the token does not wake one with it', async () => {
    const plain = await create({ timeoutMs: 300_000 });
    assert.deepEqual((await plain.getInfo()).lifecycle, { onTimeout: 'kill', autoResume: false });
    assert.equal(await plain.pause(), true);
    assert.equal(await s.pause(), true);
    const before = await autoResumes();
    assert.equal(await plain.isRunning(), false);
    await assert.rejects(plain.commands.run('echo hi'), (e: unknown) => {
      assert.ok(e instanceof SandboxError, String(e));
      assert.match(String(e), /not running|timeout/i);
      return true;
    });
    assert.equal((await plain.getInfo()).state, 'paused');
    // envd's /health needs no token on a running sandbox, but a tokenless request must not resume one.
    const health = await fetch(`${env.e2b.sandboxUrl}/health`, { headers: { 'e2b-sandbox-id': s.sandboxId } });
    assert.equal(health.status, 502);
    assert.match(((await health.json()) as { message: string }).message, /paused/);
    const wrong = await fetch(`${env.e2b.sandboxUrl}/health`, {
      headers: { 'e2b-sandbox-id': s.sandboxId, 'x-access-token': 'not-the-token' },
    });
    assert.equal(wrong.status, 502);
    assert.equal((await s.getInfo()).state, 'paused');
    assert.equal((await autoResumes()) - before, 0);
    // The option's shape is the SDKs' ({enabled: boolean}); anything else is refused before anything is claimed.
    const bad = await fetch(`${env.e2b.apiUrl}/v2/sandboxes`, {
      method: 'POST',
      headers: { 'x-api-key': env.e2b.apiKey, 'content-type': 'application/json' },
      body: JSON.stringify({ templateID: 'base', autoPause: true, autoResume: true }),
    });
    assert.equal(bad.status, 400);
    assert.match(((await bad.json()) as { message: string }).message, /^autoResume: must be an object/);
  });

  it('onTimeout pause + autoResume: hibernated at the lease end, a command wakes it with its files', async (t) => {
    const h = await create({ timeoutMs: 15_000, lifecycle: RESUMING });
    await h.files.write('/home/user/before-hibernation.txt', 'still here');
    await eventually(() => h.getInfo().then((i) => i.state), {
      until: (state) => state === 'paused',
      timeoutMs: 180_000,
      intervalMs: 1000,
      what: 'the lease end to hibernate the sandbox',
    });
    const before = await autoResumes();
    const t0 = performance.now();
    const r = await h.commands.run('cat /home/user/before-hibernation.txt');
    t.diagnostic(`a command on the hibernated sandbox, wake included: ${Math.round(performance.now() - t0)} ms`);
    assert.equal(r.stdout, 'still here');
    const info = await h.getInfo();
    assert.equal(info.state, 'running');
    // A create timeout under e2b's 5 minutes resumes with 5 minutes.
    const left = info.endAt.getTime() - Date.now();
    assert.ok(left > 180_000 && left <= 301_000, `lease left ${left} ms`);
    assert.equal((await autoResumes()) - before, 1);
  });

  it('Python SDK 2.63: lifecycle {"on_timeout": "pause", "auto_resume": True}; a command after pause() resumes it', async () => {
    const python = await pySdk('2.63.0');
    const out = (await runPython(
      python,
      `
import json
from e2b import Sandbox
sbx = Sandbox.create("base", timeout=300, lifecycle={"on_timeout": "pause", "auto_resume": True})
out = {}
try:
    out["lifecycle"] = sbx.get_info().lifecycle
    sbx.files.write("/home/user/py.txt", "from python")
    sbx.pause()
    out["paused"] = sbx.get_info().state.value
    out["stdout"] = sbx.commands.run("cat /home/user/py.txt").stdout
    out["after"] = sbx.get_info().state.value
    out["running"] = sbx.is_running()
finally:
    sbx.kill()
print(json.dumps(out))
`,
      { E2B_API_URL: env.e2b.apiUrl, E2B_SANDBOX_URL: env.e2b.sandboxUrl, E2B_API_KEY: env.e2b.apiKey },
    )) as Record<string, unknown>;
    assert.deepEqual(out, {
      lifecycle: { on_timeout: 'pause', auto_resume: true },
      paused: 'paused',
      stdout: 'from python',
      after: 'running',
      running: true,
    });
  });
});
