/**
 * envd's use of the agent against a hostile guest (test/hostile/agent-fake-guest.ts speaking the real protocol to a
 * real AgentClient): output sent before `started` is not granted credit until delivered, a subscriber that does not
 * read holds the process back within a bounded number of bytes (not items), and a file size that is not a size never
 * reaches a response head. Each: nothing escapes (a daemon would have died), memory stays bounded.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { envdAccessToken } from '../../src/api/envd.js';
import { AgentClient, FrameType } from '../../src/guest/index.js';
import { STREAM_WINDOW } from '../../src/guest/flow.js';
import { ProcessTable, type StartSpec } from '../../src/sandboxd/envd/processes.js';
import { Watchers } from '../../src/sandboxd/envd/watchers.js';
import { eventually } from '../support/eventually.js';
import { crashesDuring, FakeGuest, type GuestSession } from './agent-fake-guest.js';
import { call, startEnvd } from './agent-envd-support.js';

const cleanup: Array<() => Promise<void> | void> = [];
after(async () => {
  for (const f of cleanup.reverse()) await f();
});

const SPEC: StartSpec = {
  config: { cmd: '/bin/sh', args: [], envs: {} },
  env: {},
  cwd: '/',
  uid: 0,
  gid: 0,
  stdin: false,
};
const CHUNK = 64 << 10;

/** A fake guest whose exec requests are handed to the test, and a client connected to it. */
async function execGuest(): Promise<{ client: AgentClient; execs: Array<{ id: number; s: GuestSession }> }> {
  const execs: Array<{ id: number; s: GuestSession }> = [];
  const g = await FakeGuest.start({
    script: (req, s) => (req.op === 'exec' ? void execs.push({ id: req.id, s }) : s.ok(req.id)),
  });
  const client = await AgentClient.connect(g.path);
  cleanup.push(
    () => client.close(),
    () => g.close(),
  );
  return { client, execs };
}

describe('hostile guest: envd process output', () => {
  it('output sent before `started` is held without credit until it is delivered', async () => {
    const { client, execs } = await execGuest();
    const table = new ProcessTable();
    const crashes = await crashesDuring(async () => {
      const starting = table.start(client, SPEC, 0);
      await eventually(() => execs.length, { until: (n) => n === 1, timeoutMs: 5000 });
      const { id, s } = execs[0]!;
      // A whole window of output and no `started`: the host may take it, but must not ask for more.
      for (let sent = 0; sent < STREAM_WINDOW; sent += CHUNK) s.frame(FrameType.Out, id, Buffer.alloc(CHUNK, 0x61));
      await new Promise((r) => setTimeout(r, 300));
      assert.equal(s.granted.get(id) ?? 0, 0, 'credit was granted for output nobody has received yet');
      s.json(FrameType.Evt, id, { type: 'started', pid: 42 });
      const { events } = await starting;
      let got = 0;
      for await (const ev of events) {
        if (ev.case === 'data') got += ev.value.output.value.byteLength;
        if (got >= STREAM_WINDOW) break;
      }
      assert.equal(got, STREAM_WINDOW);
      await eventually(() => s.granted.get(id) ?? 0, { until: (n) => n > 0, timeoutMs: 5000, what: 'credit back' });
      s.json(FrameType.Res, id, { ok: true, exitCode: 0 });
    });
    assert.deepEqual(crashes, []);
  });

  it('a subscriber that never reads holds the process back within bytes, not items', async () => {
    const { client, execs } = await execGuest();
    const table = new ProcessTable();
    let sent = 0;
    const crashes = await crashesDuring(async () => {
      const starting = table.start(client, SPEC, 0);
      await eventually(() => execs.length, { until: (n) => n === 1, timeoutMs: 5000 });
      const { id, s } = execs[0]!;
      s.json(FrameType.Evt, id, { type: 'started', pid: 43 });
      await starting; // its event stream is never read
      // A well-behaved guest: it sends exactly as much as its credit allows, at most 64 MiB.
      let credit = STREAM_WINDOW;
      const pump = () => {
        while (credit >= CHUNK && sent < 64 << 20) {
          s.frame(FrameType.Out, id, Buffer.alloc(CHUNK, 0x62));
          credit -= CHUNK;
          sent += CHUNK;
        }
      };
      s.onGrant = (gid, n) => {
        if (gid !== id) return;
        credit += n;
        pump();
      };
      pump();
      await new Promise((r) => setTimeout(r, 1000));
      s.json(FrameType.Res, id, { ok: true, exitCode: 0 });
    });
    assert.deepEqual(crashes, []);
    // Unread: the queue's high water (256 KiB) plus the stream's window in flight, and a chunk of slack.
    assert.ok(sent <= 2 * STREAM_WINDOW + CHUNK, `the host let the guest send ${sent} bytes nobody read`);
  });
});

describe('hostile guest: watch events (not flow-controlled)', () => {
  it("a flood of long event paths stays within the polled watchers' byte budget", async () => {
    const dirStat = { path: '/d', name: 'd', type: 'dir', size: 0, mode: 0o755, mtimeMs: 0 };
    const g = await FakeGuest.start({
      script: (req, s) => {
        if (req.op === 'file.stat') return void s.json(FrameType.Res, req.id, { ok: true, ...dirStat });
        if (req.op !== 'file.watch') return s.ok(req.id);
        s.json(FrameType.Evt, req.id, { type: 'watching' });
        const long = `/d/${'p'.repeat(4000)}`;
        for (let i = 0; i < 20_000; i++)
          s.json(FrameType.Evt, req.id, { type: 'fs', op: 'write', path: `${long}${i}` });
        s.ok(req.id + 1_000_000); // a marker nobody waits for: the flood has been sent
      },
    });
    const client = await AgentClient.connect(g.path);
    cleanup.push(
      () => client.close(),
      () => g.close(),
    );
    const watchers = new Watchers();
    let buffered = 0;
    const crashes = await crashesDuring(async () => {
      const id = await watchers.create(client, { path: '/d', recursive: false, includeEntry: false });
      await client.ping(30_000); // answered after the whole flood was read
      await new Promise((r) => setTimeout(r, 100));
      for (const e of watchers.take(id)) buffered += e.name.length;
    });
    assert.deepEqual(crashes, []);
    assert.ok(buffered > 0, 'events were delivered');
    assert.ok(buffered <= 8 << 20, `the polled watcher held ${buffered} bytes of event names`);
  });
});

describe('hostile guest: watch events that need lookups', () => {
  it('events whose entries the guest never answers for queue at most a bounded number of lookups', async () => {
    const dirStat = { path: '/d', name: 'd', type: 'dir', size: 0, mode: 0o755, mtimeMs: 0 };
    let stats = 0;
    const g = await FakeGuest.start({
      script: (req, s) => {
        if (req.op === 'file.stat' && req.args.path === '/d')
          return void s.json(FrameType.Res, req.id, { ok: true, ...dirStat });
        if (req.op === 'file.stat') return void stats++; // never answered
        if (req.op === 'file.read') return void s.json(FrameType.Res, req.id, { ok: false, code: 'ENOENT' });
        if (req.op !== 'file.watch') return s.ok(req.id);
        s.json(FrameType.Evt, req.id, { type: 'watching' });
        for (let i = 0; i < 20_000; i++) s.json(FrameType.Evt, req.id, { type: 'fs', op: 'create', path: `/d/f${i}` });
      },
    });
    const client = await AgentClient.connect(g.path, { requestTimeoutMs: 60_000 });
    cleanup.push(
      () => client.close(),
      () => g.close(),
    );
    const watchers = new Watchers();
    const crashes = await crashesDuring(async () => {
      await watchers.create(client, { path: '/d', recursive: false, includeEntry: true });
      await client.ping(30_000); // answered after the whole flood was read
      await new Promise((r) => setTimeout(r, 200));
    });
    assert.deepEqual(crashes, []);
    assert.ok(stats > 0, 'entries were looked up');
    assert.ok(stats <= 2048, `${stats} lookups in flight for one watch`);
  });
});

describe('hostile guest: values that reach response heads', () => {
  it('a file size of "1\\n" is a 502 for that download, not a crash in writeHead', async () => {
    const g = await FakeGuest.start({
      script: (req, s) => {
        if (req.op === 'file.stat')
          return void s.json(FrameType.Res, req.id, {
            ok: true,
            path: '/f',
            name: 'f',
            type: 'file',
            size: '1\n',
            mode: 0o644,
            mtimeMs: 0,
          });
        if (req.op === 'file.read' && req.args.path === '/f') {
          s.frame(FrameType.Out, req.id, 'a');
          return void s.json(FrameType.Res, req.id, { ok: true, size: 1 });
        }
        if (req.op === 'file.read') return void s.json(FrameType.Res, req.id, { ok: false, code: 'ENOENT' });
        s.ok(req.id);
      },
    });
    const client = await AgentClient.connect(g.path);
    const rec = { id: 'sbx-files', token: 'tok-files', hibernated: false };
    const { envd, port } = await startEnvd(rec, client);
    cleanup.push(
      () => envd.close(),
      () => client.close(),
      () => g.close(),
    );
    const headers = { 'e2b-sandbox-id': rec.id, 'x-access-token': envdAccessToken(rec.token) };
    let answer: Awaited<ReturnType<typeof call>> | undefined;
    const crashes = await crashesDuring(async () => {
      answer = await call(port, '/files?path=/f', headers);
    });
    assert.deepEqual(crashes, []);
    assert.ok(answer && !(answer instanceof Error), String(answer));
    assert.equal(answer.status, 502);
    assert.equal((JSON.parse(answer.body) as { code: number }).code, 502);
    // envd goes on serving (this VM's agent connection is gone, which is this VM's problem alone).
    const health = await call(port, '/health', headers);
    assert.ok(!(health instanceof Error) && health.status === 204);
  });
});
