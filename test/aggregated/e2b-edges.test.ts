/**
 * e2b's behaviour at the edges (issue 31), with the unmodified e2b SDK (npm e2b, pinned) against the aggregated
 * layout: what a paused sandbox answers, the list's order, file removal, symlinks, procfs, the events of one write,
 * setTimeout(0), metrics ranges, a command stream cut by kill, and the onTimeout keepMemory option. Each expectation
 * is what e2b itself does (docs/e2b.md "Data plane (envd)" and "Control plane" say where it comes from).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { FileType, FilesystemEventType, NotFoundError, Sandbox, SandboxError, TimeoutError } from 'e2b';
import { e2bOptions, e2bSandboxes, getAggregated, type AggregatedEnv } from '../support/aggregated.js';
import { eventually } from '../support/eventually.js';

let env: AggregatedEnv;
const opts = () => e2bOptions(env);
const sandboxes = e2bSandboxes(() => env);
const create = sandboxes.create;

describe('e2b SDK at the edges (aggregated layout)', () => {
  const tag = `edges${Date.now()}`;
  /** Created one after another: a, then b, then c. */
  let a: Sandbox;
  let b: Sandbox;
  let c: Sandbox;

  before(async () => {
    env = await getAggregated();
    a = await create({ metadata: { tag }, timeoutMs: 600_000 });
    b = await create({ metadata: { tag }, timeoutMs: 600_000 });
    c = await create({ metadata: { tag }, timeoutMs: 600_000 });
  });
  after(async () => {
    await sandboxes.killAll();
  });

  it('lists newest first, `order` over every page, startedAt to the millisecond, startedAfter inclusive', async () => {
    const list = (o: Parameters<typeof Sandbox.list>[0] = {}) =>
      Sandbox.list({ ...opts(), ...o, query: { metadata: { tag }, ...o.query } });
    const all = async (o: Parameters<typeof Sandbox.list>[0] = {}) => {
      const p = list(o);
      const out: string[] = [];
      while (p.hasNext) out.push(...(await p.nextItems()).map((s) => s.sandboxId));
      return out;
    };
    const ids = [a.sandboxId, b.sandboxId, c.sandboxId];
    assert.deepEqual(await all(), [...ids].reverse(), 'newest first');
    assert.deepEqual(await all({ limit: 1 }), [...ids].reverse(), 'newest first, one per page');
    assert.deepEqual(await all({ limit: 2, order: 'asc' }), ids, 'oldest first over both pages');
    const infos = await list().nextItems();
    const startOf = (id: string) => infos.find((s) => s.sandboxId === id)!.startedAt;
    // A claim's start to the millisecond: three creates in a row do not all start on a whole second.
    assert.ok(
      infos.some((s) => s.startedAt.getTime() % 1000 !== 0),
      infos.map((s) => s.startedAt.toISOString()).join(' '),
    );
    assert.equal((await b.getInfo()).startedAt.getTime(), startOf(b.sandboxId).getTime());
    const since = await all({ query: { startedAfter: startOf(b.sandboxId) } });
    assert.deepEqual(since, [c.sandboxId, b.sandboxId], 'startedAfter includes the sandbox started at that instant');
  });

  it("remove of a missing path succeeds, as envd's RemoveAll does", async () => {
    await a.files.remove('/tmp/never-was-here');
    await a.files.remove('/tmp/never-was-here/nor-this');
    assert.equal(await a.files.exists('/tmp/never-was-here'), false);
  });

  it("getInfo of a symlink: the target's type, and the target as an absolute path", async () => {
    await a.commands.run('mkdir -p /tmp/real-dir && echo x > /tmp/real-file && ln -sfn ../../tmp/real-dir ~/to-dir');
    await a.commands.run('ln -sfn /tmp/real-file ~/to-file && ln -sfn /tmp/nothing ~/dangling');
    const toDir = await a.files.getInfo('/home/user/to-dir');
    assert.equal(toDir.type, FileType.DIR, JSON.stringify(toDir));
    assert.equal(toDir.symlinkTarget, '/tmp/real-dir');
    assert.equal(toDir.name, 'to-dir');
    assert.equal(toDir.path, '/home/user/to-dir');
    const toFile = await a.files.getInfo('to-file');
    assert.equal(toFile.type, FileType.FILE, JSON.stringify(toFile));
    assert.equal(toFile.symlinkTarget, '/tmp/real-file');
    const dangling = await a.files.getInfo('dangling');
    assert.equal(dangling.symlinkTarget, '/tmp/nothing');
    assert.notEqual(dangling.type, FileType.DIR);
    assert.notEqual(dangling.type, FileType.FILE);
  });

  it('a procfs file (size 0 in its stat) is read to its end', async () => {
    assert.match(await a.files.read('/proc/version'), /^Linux version /);
    assert.match(await a.files.read('/proc/self/status'), /^Name:/m);
  });

  it('one write of a new file is CREATE, CHMOD, WRITE to a watcher, as on e2b', async () => {
    await a.files.makeDir('/home/user/watched');
    const events: string[] = [];
    const w = await a.files.watchDir('/home/user/watched', (e) => void events.push(`${e.type}:${e.name}`));
    try {
      await a.files.write('/home/user/watched/one.txt', 'This file will be watched.');
      // Events come in order: once the marker's arrives, every event of the write has.
      await a.files.makeDir('/home/user/watched/marker');
      await eventually(async () => events, {
        until: (ev) => ev.includes(`${FilesystemEventType.CREATE}:marker`),
        timeoutMs: 30_000,
        what: 'the marker event',
      });
    } finally {
      await w.stop();
    }
    assert.deepEqual(
      events.filter((e) => e.endsWith(':one.txt')),
      [
        `${FilesystemEventType.CREATE}:one.txt`,
        `${FilesystemEventType.CHMOD}:one.txt`,
        `${FilesystemEventType.WRITE}:one.txt`,
      ],
    );
  });

  it('metrics honour start and end: a range in the past has no samples, one around now has the sample', async () => {
    const now = Date.now();
    const past = await a.getMetrics({ start: new Date(now - 3_600_000), end: new Date(now - 1_800_000) });
    assert.deepEqual(past, []);
    const around = await a.getMetrics({ start: new Date(now - 60_000), end: new Date(now + 60_000) });
    assert.equal(around.length, 1);
    const t = around[0]!.timestamp.getTime();
    assert.ok(t >= now - 60_000 && t <= now + 60_000, around[0]!.timestamp.toISOString());
    assert.deepEqual(await a.getMetrics({ start: new Date(now + 3_600_000) }), []);
  });

  it('a paused sandbox is not running: /health 502, commands refused as "not running"; connect resumes it', async () => {
    await b.files.write('/tmp/kept', 'kept');
    assert.equal(await b.pause(), true);
    assert.equal(await b.isRunning(), false);
    const health = await fetch(`${env.e2b.sandboxUrl}/health`, { headers: { 'e2b-sandbox-id': b.sandboxId } });
    assert.equal(health.status, 502);
    const body = (await health.json()) as { code: number; message: string; sandboxId: string };
    assert.equal(body.code, 502);
    assert.equal(typeof body.sandboxId, 'string');
    assert.match(body.message, /paused/);
    // 502 is `unavailable` to Connect: the SDK's "sandbox is probably not running anymore", not an internal error.
    await assert.rejects(b.commands.run('echo hi'), (e: unknown) => {
      assert.ok(e instanceof SandboxError, String(e));
      assert.doesNotMatch(String(e), /internal/i);
      assert.match(String(e), /not running|timeout/i);
      return true;
    });
    await assert.rejects(b.files.read('/tmp/kept'), TimeoutError);
    const back = await Sandbox.connect(b.sandboxId, opts());
    assert.equal(await back.isRunning(), true);
    assert.equal(await back.files.read('/tmp/kept'), 'kept');
  });

  it('setTimeout(0) ends the sandbox now', async () => {
    await c.setTimeout(0);
    await eventually(() => c.isRunning(), { until: (r) => r === false, timeoutMs: 30_000, what: 'the sandbox to end' });
    await eventually(
      () =>
        c.getInfo().then(
          () => 'there',
          (e: unknown) => (e instanceof NotFoundError ? 'gone' : e),
        ),
      {
        until: (r) => r === 'gone',
        timeoutMs: 30_000,
        what: 'the sandbox to leave the API',
      },
    );
  });

  it('onTimeout pause with or without memory is kept (e2b-files-pause.test.ts has the filesystem-only pause)', async () => {
    const filesOnly = await create({ lifecycle: { onTimeout: { action: 'pause', keepMemory: false } } });
    assert.equal((await filesOnly.getInfo()).lifecycle?.onTimeout, 'pause');
    const kept = await create({ lifecycle: { onTimeout: { action: 'pause', keepMemory: true } } });
    assert.equal((await kept.getInfo()).lifecycle?.onTimeout, 'pause');
  });

  it('a command cut by kill ends as on e2b: "killed or reached its end of life"', async () => {
    const cmd = await a.commands.run('sleep 600', { background: true, timeoutMs: 0 });
    const ended = cmd.wait().then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.equal(await a.kill(), true);
    const err = await ended;
    assert.ok(err instanceof TimeoutError, String(err));
    assert.match(String(err), /killed or reached its end of life/);
  });
});
