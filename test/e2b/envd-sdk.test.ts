/**
 * The data plane alone: one sandboxd engine with real microVMs (template sandbox/base) and its envd listener, driven
 * by the unmodified e2b SDK (npm e2b, pinned) pointed at the listener with E2B_SANDBOX_URL routing (the
 * E2b-Sandbox-Id header). The sandbox handle is built from a node claim, as the control plane would (its id, the
 * envd version and the access token derived from the claim's token), so this covers envd without the control plane.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { CommandExitError, FileType, NotFoundError, Sandbox, TimeoutError } from 'e2b';
import { ENVD_VERSION, envdAccessToken } from '../../src/api/envd.js';
import { NodeEngine } from '../../src/sandboxd/engine.js';
import { fileSignature } from '../../src/api/envd.js';
import { EnvdServer } from '../../src/sandboxd/envd/server.js';
import { MAX_WATCHERS } from '../../src/sandboxd/envd/watchers.js';
import { eventually } from '../support/eventually.js';

const KEY = { template: 'sandbox/base', net: 'none', size: 'small' } as const;

describe('envd data plane with the e2b SDK (real microVMs, one node)', () => {
  let dir: string;
  let engine: NodeEngine;
  let envd: EnvdServer;
  let base: string;
  let sbx: Sandbox;
  let claimId: string;
  let token: string;

  const handle = (opts: { id?: string; token?: string } = {}) =>
    new Sandbox({
      sandboxId: opts.id ?? claimId,
      envdVersion: ENVD_VERSION,
      envdAccessToken: opts.token ?? envdAccessToken(token),
      sandboxUrl: base,
      apiKey: 'not used by envd calls',
      requestTimeoutMs: 60_000,
    });

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'envd-sdk-'));
    engine = new NodeEngine({ dataDir: dir, nodeName: 'envd-node', advertiseAddr: '127.0.0.1:1', maxClaims: 8 });
    await engine.start();
    envd = new EnvdServer({ engine, maxUploadBytes: 16 << 20 });
    base = `http://127.0.0.1:${(await envd.listen('127.0.0.1', 0)).port}`;
    const rec = await engine.claim({
      key: KEY,
      ttlSeconds: 1800,
      object: {
        metadata: { name: 'envd-test', namespace: 'e2b' },
        spec: {
          podTemplate: {
            spec: {
              containers: [{ name: 'main', image: KEY.template, env: [{ name: 'SBX_ENV', value: 'from-create' }] }],
            },
          },
        },
      },
    });
    claimId = rec.id;
    token = rec.token;
    sbx = handle();
  });

  after(async () => {
    await envd?.close();
    await engine?.close({ destroyVms: true });
    await rm(dir, { recursive: true, force: true });
  });

  it('runs a command: stdout, exit code, the default user, envVars from create and per-command envs', async () => {
    const r = await sbx.commands.run('echo hi; whoami; pwd; echo "$SBX_ENV $FOO"', { envs: { FOO: 'bar' } });
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout, 'hi\nuser\n/home/user\nfrom-create bar\n');
    const root = await sbx.commands.run('whoami', { user: 'root' });
    assert.equal(root.stdout, 'root\n');
  });

  it('a non-zero exit raises CommandExitError with the code and output', async () => {
    await assert.rejects(sbx.commands.run('echo out; echo err >&2; exit 3'), (err: unknown) => {
      assert.ok(err instanceof CommandExitError, String(err));
      assert.equal(err.exitCode, 3);
      assert.equal(err.stdout, 'out\n');
      assert.equal(err.stderr, 'err\n');
      return true;
    });
  });

  it('streams output as it is produced (onStdout before the command ends)', async () => {
    const seen: Array<{ chunk: string; at: number }> = [];
    const started = Date.now();
    await sbx.commands.run('echo one; sleep 1; echo two', {
      onStdout: (d) => void seen.push({ chunk: d, at: Date.now() - started }),
    });
    assert.deepEqual(seen.map((s) => s.chunk).join(''), 'one\ntwo\n');
    assert.ok(seen.length >= 2 && seen[1]!.at - seen[0]!.at >= 800, JSON.stringify(seen));
  });

  it('a background command is listed, killed, and its wait then raises', async () => {
    const h = await sbx.commands.run('sleep 300', { background: true });
    assert.ok(h.pid > 0);
    const listed = await sbx.commands.list();
    assert.ok(
      listed.some((p) => p.pid === h.pid && p.args.includes('sleep 300')),
      JSON.stringify(listed),
    );
    assert.equal(await sbx.commands.kill(h.pid), true);
    await assert.rejects(h.wait(), CommandExitError);
    assert.equal(await sbx.commands.kill(h.pid), false);
  });

  it('stdin: sendStdin reaches the process, closeStdin ends its input', async () => {
    const h = await sbx.commands.run('cat; echo done', { background: true, stdin: true });
    await sbx.commands.sendStdin(h.pid, 'hello\n');
    await sbx.commands.closeStdin(h.pid);
    const r = await h.wait();
    assert.equal(r.stdout, 'hello\ndone\n');
  });

  it('a pty takes input and reports output; resize works', async () => {
    let out = '';
    const pty = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => void (out += Buffer.from(d).toString()) });
    await sbx.pty.resize(pty.pid, { cols: 100, rows: 30 });
    await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('stty size; echo pty-$((40+2))\n'));
    await eventually(async () => out, {
      until: (o) => o.includes('pty-42') && o.includes('30 100'),
      timeoutMs: 30_000,
      what: 'pty output',
    });
    await sbx.pty.kill(pty.pid);
  });

  it('a command past its timeout is killed and raises TimeoutError', async () => {
    await assert.rejects(sbx.commands.run('sleep 30', { timeoutMs: 1500 }), TimeoutError);
    await eventually(() => sbx.commands.list(), {
      until: (listed) => !listed.some((p) => p.args.includes('sleep 30')),
      timeoutMs: 10_000,
      what: 'the timed-out command to be gone',
    });
  });

  it('files: write and read text and 5 MiB of binary, list, makeDir, rename, remove, exists', async () => {
    await sbx.files.write('/tmp/e2b/a.txt', 'hello file');
    assert.equal(await sbx.files.read('/tmp/e2b/a.txt'), 'hello file');
    const blob = Buffer.alloc(5 << 20);
    for (let i = 0; i < blob.length; i += 4) blob.writeUInt32LE((i * 2654435761) >>> 0, i);
    const info = await sbx.files.write(
      '/tmp/e2b/blob.bin',
      blob.buffer.slice(blob.byteOffset, blob.byteOffset + blob.length),
    );
    assert.equal(info.path, '/tmp/e2b/blob.bin');
    const back = Buffer.from(await sbx.files.read('/tmp/e2b/blob.bin', { format: 'bytes' }));
    assert.ok(back.equals(blob), 'binary round trip');
    const entries = await sbx.files.list('/tmp/e2b');
    assert.deepEqual(entries.map((e) => e.name).sort(), ['a.txt', 'blob.bin']);
    const a = entries.find((e) => e.name === 'a.txt')!;
    assert.equal(a.type, FileType.FILE);
    assert.equal(a.size, 10);
    assert.equal(a.owner, 'user');
    assert.equal(await sbx.files.makeDir('/tmp/e2b/sub'), true);
    assert.equal(await sbx.files.makeDir('/tmp/e2b/sub'), false);
    const moved = await sbx.files.rename('/tmp/e2b/a.txt', '/tmp/e2b/sub/b.txt');
    assert.equal(moved.path, '/tmp/e2b/sub/b.txt');
    assert.equal(await sbx.files.exists('/tmp/e2b/a.txt'), false);
    assert.equal(await sbx.files.exists('/tmp/e2b/sub/b.txt'), true);
    await sbx.files.remove('/tmp/e2b/sub');
    assert.equal(await sbx.files.exists('/tmp/e2b/sub'), false);
    await assert.rejects(sbx.files.read('/tmp/e2b/missing'), NotFoundError);
    // Relative paths are the user's home, and gzip both ways works.
    await sbx.files.write('rel.txt', 'home', { gzip: true });
    assert.equal((await sbx.commands.run('cat /home/user/rel.txt')).stdout, 'home');
    assert.equal(await sbx.files.read('rel.txt', { gzip: true }), 'home');
  });

  it('watchDir reports creates, writes and removes', async () => {
    await sbx.files.makeDir('/tmp/watched');
    const events: string[] = [];
    const w = await sbx.files.watchDir('/tmp/watched', (e) => void events.push(`${e.type}:${e.name}`));
    await sbx.files.write('/tmp/watched/x', '1');
    await sbx.files.remove('/tmp/watched/x');
    await eventually(async () => events, {
      until: (ev) => ev.some((e) => e.startsWith('create:x')) && ev.some((e) => e.startsWith('remove:x')),
      timeoutMs: 20_000,
      what: 'create and remove events',
    });
    await w.stop();
  });

  it('refuses a wrong access token (401) and answers for an unknown sandbox with 502 "was not found"', async () => {
    const bad = handle({ token: 'wrong' });
    await assert.rejects(bad.commands.run('true'), /401|unauthenticated|Unauthorized|authentication/i);
    const res = await fetch(`${base}/files?path=/etc/hostname`, {
      headers: { 'e2b-sandbox-id': claimId, 'x-access-token': 'wrong' },
    });
    assert.equal(res.status, 401);
    assert.equal(((await res.json()) as { code: number }).code, 401);
    const gone = await fetch(`${base}/health`, { headers: { 'e2b-sandbox-id': 'sb_nope' } });
    assert.equal(gone.status, 502);
    assert.match(((await gone.json()) as { message: string }).message, /was not found/);
    assert.equal(await handle({ id: 'sb_nope' }).isRunning(), false);
    assert.equal(await sbx.isRunning(), true);
  });

  it('a read is gzipped only when the client takes gzip and the data shrinks; both read back exactly', async () => {
    const text = 'the same line of text, again and again\n'.repeat(5000);
    const noise = randomBytes(256 << 10);
    await sbx.files.write('/tmp/text.txt', text);
    await sbx.files.write('/tmp/noise.bin', noise.buffer.slice(noise.byteOffset, noise.byteOffset + noise.length));
    const h = { 'e2b-sandbox-id': claimId, 'x-access-token': envdAccessToken(token), 'accept-encoding': 'gzip' };
    const t = await fetch(`${base}/files?path=/tmp/text.txt`, { headers: h });
    assert.equal(t.headers.get('content-encoding'), 'gzip', 'text is compressed');
    assert.equal(await t.text(), text);
    const n = await fetch(`${base}/files?path=/tmp/noise.bin`, { headers: h });
    assert.equal(n.headers.get('content-encoding'), null, 'random bytes are sent as they are');
    assert.equal(n.headers.get('content-length'), String(noise.length));
    assert.ok(Buffer.from(await n.arrayBuffer()).equals(noise));
    const viaSdk = Buffer.from(await sbx.files.read('/tmp/noise.bin', { format: 'bytes', gzip: true }));
    assert.ok(viaSdk.equals(noise), 'the SDK asking for gzip reads the uncompressed answer');
  });

  it('bad input is a clean error and the node goes on: NUL and empty paths, malformed envelopes', async () => {
    const h = { 'e2b-sandbox-id': claimId, 'x-access-token': envdAccessToken(token) };
    for (const q of ['path=%2Ftmp%2Fa%00b', 'path=']) {
      const r = await fetch(`${base}/files?${q}`, { headers: h });
      assert.equal(r.status, 400, q);
      assert.equal(((await r.json()) as { code: number }).code, 400);
    }
    const frame = (len: number, body: Buffer) => {
      const b = Buffer.alloc(5 + body.length);
      b.writeUInt32BE(len, 1);
      body.copy(b, 5);
      return b;
    };
    const stream = { ...h, 'content-type': 'application/connect+json', 'connect-protocol-version': '1' };
    for (const body of [frame(1000, Buffer.from('{}')), frame(0xfffffff0, Buffer.from('{}')), Buffer.from([0, 0])]) {
      const r = await fetch(`${base}/process.Process/Start`, { method: 'POST', headers: stream, body });
      const text = Buffer.from(await r.arrayBuffer());
      assert.ok(r.status === 200 ? text.includes('"error"') : r.status >= 400, `${r.status} ${text.toString()}`);
    }
    assert.equal((await sbx.commands.run('echo still')).stdout, 'still\n');
  });
  it(
    'a multipart upload over the cap is answered 413 while it is still being sent, and the node goes on',
    { timeout: 60_000 },
    async () => {
      // Before, the part's writer failed at the cap and busboy, waiting for that part to be read, never closed: the
      // upload was never answered (and its guest write was never cancelled).
      const boundary = 'sbx-boundary';
      const status = await new Promise<number>((resolve, reject) => {
        const req = httpRequest(`${base}/files?path=/tmp/over-cap.bin`, {
          method: 'POST',
          headers: {
            'e2b-sandbox-id': claimId,
            'x-access-token': envdAccessToken(token),
            'content-type': `multipart/form-data; boundary=${boundary}`,
          },
        });
        let answered = false;
        req.on('response', (res) => {
          answered = true;
          res.resume();
          resolve(res.statusCode ?? 0);
          req.destroy();
        });
        req.on('error', (err) => {
          if (!answered) reject(err);
        });
        req.write(`--${boundary}\r\ncontent-disposition: form-data; name="file"; filename="over-cap.bin"\r\n\r\n`);
        const chunk = Buffer.alloc(1 << 20, 7);
        let sent = 0;
        const more = () => {
          while (!answered && sent < 64) {
            sent++;
            if (!req.write(chunk)) return void req.once('drain', more);
          }
        };
        more();
      });
      assert.equal(status, 413);
      assert.equal(await sbx.files.exists('/tmp/over-cap.bin'), false, 'the partial file is removed');
      assert.equal((await sbx.commands.run('echo after-413')).stdout, 'after-413\n');
    },
  );
  it('a multi-file write puts each file at its own full path; a signed upload writes only its signed path', async () => {
    // The SDK sends one multipart part per file, its filename the full target path and no path query; before,
    // busboy kept only the filename's last component, and both files landed in the home directory as "x.txt".
    const infos = await sbx.files.write([
      { path: '/tmp/multi-a/x.txt', data: 'A' },
      { path: '/tmp/multi-b/x.txt', data: 'B' },
    ]);
    assert.deepEqual(
      infos.map((f) => f.path),
      ['/tmp/multi-a/x.txt', '/tmp/multi-b/x.txt'],
    );
    assert.equal(await sbx.files.read('/tmp/multi-a/x.txt'), 'A');
    assert.equal(await sbx.files.read('/tmp/multi-b/x.txt'), 'B');

    const signed = new URLSearchParams({
      path: '/tmp/signed.txt',
      signature: fileSignature('/tmp/signed.txt', 'write', '', envdAccessToken(token)),
    });
    const form = (names: string[]) => {
      const f = new FormData();
      for (const n of names) f.append('file', new Blob([`to ${n}`]), n);
      return f;
    };
    const post = (names: string[]) =>
      fetch(`${base}/files?${signed}`, { method: 'POST', headers: { 'e2b-sandbox-id': claimId }, body: form(names) });
    const one = await post(['/tmp/signed.txt']);
    assert.equal(one.status, 200, await one.text());
    assert.equal(await sbx.files.read('/tmp/signed.txt'), 'to /tmp/signed.txt');
    const two = await post(['/tmp/signed.txt', '/tmp/unsigned.txt']);
    assert.equal(two.status, 400);
    assert.match(((await two.json()) as { message: string }).message, /signed upload writes the one path/);
    assert.equal(await sbx.files.exists('/tmp/unsigned.txt'), false, 'nothing written where nobody signed');
  });
  it('a sandbox holds at most MAX_WATCHERS polled watchers; a removed one makes room', async () => {
    const rpc = (method: string, body: unknown) =>
      fetch(`${base}/filesystem.Filesystem/${method}`, {
        method: 'POST',
        headers: {
          'e2b-sandbox-id': claimId,
          'x-access-token': envdAccessToken(token),
          'content-type': 'application/json',
          'connect-protocol-version': '1',
        },
        body: JSON.stringify(body),
      });
    const ids: string[] = [];
    for (let i = 0; i < MAX_WATCHERS; i++) {
      const r = await rpc('CreateWatcher', { path: '/tmp' });
      assert.equal(r.status, 200, await r.clone().text());
      ids.push(((await r.json()) as { watcherId: string }).watcherId);
    }
    const over = await rpc('CreateWatcher', { path: '/tmp' });
    assert.equal(over.status, 429);
    assert.match(((await over.json()) as { message: string }).message, /holds 64 watchers/);
    assert.equal((await rpc('RemoveWatcher', { watcherId: ids.pop() })).status, 200);
    const again = await rpc('CreateWatcher', { path: '/tmp' });
    assert.equal(again.status, 200);
    ids.push(((await again.json()) as { watcherId: string }).watcherId);
    for (const watcherId of ids) await rpc('RemoveWatcher', { watcherId });
  });
});
