/**
 * The agent protocol without a VM: the real Go agent listening on a unix socket on this host, and a
 * hostile fake agent. Covers frame limits on both sides, a guest that never answers, and flow control (the
 * host's credit accounting, a stalled stream beside live ones, and an older host that sends no credit).
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer, connect, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { SandboxError } from '../../src/errors.js';
import {
  AGENT_MAGIC,
  AgentClient,
  encodeExecPayload,
  encodeFrame,
  ensureAgent,
  FrameDecoder,
  FrameType,
  HOST_MAGIC,
  MAX_PAYLOAD,
} from '../../src/guest/index.js';
import { STREAM_WINDOW, StreamInput, StreamOutput, type StreamLink } from '../../src/guest/flow.js';
import { eventually } from '../support/eventually.js';
import { BUILD_TIMEOUT_MS, sleep } from './helpers.js';

describe('agent protocol', { timeout: BUILD_TIMEOUT_MS }, () => {
  let dir: string;
  let agent: ChildProcess;
  let sock: string;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sbxa-'));
    sock = join(dir, 'agent.sock');
    const bin = (await ensureAgent({ progress: (l) => process.stderr.write(`  [build] ${l}\n`) })).binary;
    agent = spawn(bin, ['-port', `unix:${sock}`], { stdio: 'ignore' });
    // Tests dial the socket raw (no retrying client), so wait until the agent has created it.
    await eventually(() => existsSync(sock), { until: (up) => up, timeoutMs: 10_000, what: 'the agent socket' });
  });

  after(async () => {
    agent.kill('SIGKILL');
    await new Promise((r) =>
      agent.exitCode !== null || agent.signalCode !== null ? r(undefined) : agent.once('exit', r),
    );
    rmSync(dir, { recursive: true, force: true });
  });

  /** Send one hand-built frame on a fresh session and return the agent's JSON answer to `id`. */
  function rawAnswer(frame: Buffer, id: number): Promise<Record<string, unknown>> {
    return new Promise((resolve) => {
      const s = connect(sock);
      const dec = new FrameDecoder({ expectMagic: AGENT_MAGIC });
      s.on('data', (d: Buffer) => {
        for (const f of dec.push(d)) {
          if (f.id === id) {
            resolve(JSON.parse(f.payload.toString()) as Record<string, unknown>);
            s.destroy();
          }
        }
      });
      s.write(HOST_MAGIC);
      s.write(frame);
    });
  }

  async function assertStillServes(): Promise<void> {
    const c = await AgentClient.connect(sock);
    try {
      assert.equal((await c.run(['echo', 'still-fine'])).stdout.toString(), 'still-fine\n');
    } finally {
      c.close();
    }
  }

  it('decodes frames split at any byte boundary', () => {
    const frames = Buffer.concat([
      Buffer.from(AGENT_MAGIC),
      encodeFrame(FrameType.Res, 7, Buffer.from('{"ok":true}')),
      encodeFrame(FrameType.Out, 7, Buffer.from('abc')),
    ]);
    const dec = new FrameDecoder({ expectMagic: AGENT_MAGIC });
    const got = [...frames].flatMap((b) => dec.push(Buffer.from([b])));
    assert.deepEqual(
      got.map((f) => [f.type, f.id, f.payload.toString()]),
      [
        [FrameType.Res, 7, '{"ok":true}'],
        [FrameType.Out, 7, 'abc'],
      ],
    );
  });

  it('rejects an outgoing frame over the limit before sending it', () => {
    assert.throws(
      () => encodeFrame(FrameType.In, 1, Buffer.alloc(MAX_PAYLOAD + 1)),
      (e: unknown) => e instanceof SandboxError && e.code === 'agent.frame-too-large',
    );
  });

  it('the agent answers an oversized frame with an error and stays usable', async () => {
    // Bypass the client's own check: hand-build a frame header that announces MAX_PAYLOAD+1 bytes.
    const header = Buffer.alloc(9);
    header.writeUInt32BE(5 + MAX_PAYLOAD + 1, 0);
    header.writeUInt8(FrameType.Req, 4);
    header.writeUInt32BE(999_999, 5);
    const body = await rawAnswer(Buffer.concat([header, Buffer.alloc(MAX_PAYLOAD + 1)]), 999_999);
    assert.deepEqual([body.ok, body.code], [false, 'EFRAMETOOLARGE']);
    await assertStillServes();
  });

  it('execs through the binary EXEC frame with the arguments of the exec op, and through the op without it', async () => {
    const c = await AgentClient.connect(sock);
    try {
      assert.ok(c.info.features.includes('exec.bin'), c.info.features.join(' '));
      // The second round is what an agent that predates the frame gets: the JSON exec op.
      for (const features of [c.info.features, ['exec']]) {
        c.info.features = features;
        const p = c.exec(['sh', '-c', 'printf "%s|%s|%s" "$FOO" "$(pwd)" "$(cat)"; exit 3'], {
          env: { FOO: 'a=b c' },
          cwd: dir,
          stdin: true,
          timeoutMs: 20_000,
        });
        p.write('from-stdin');
        p.closeStdin();
        const r = await p.wait();
        assert.deepEqual([r.exitCode, r.stdout.toString()], [3, `a=b c|${dir}|from-stdin`], features.join(' '));
      }
    } finally {
      c.close();
    }
  });

  it('collects output up to maxOutputBytes per stream and still forwards all of it', async () => {
    const c = await AgentClient.connect(sock);
    try {
      const seen: Buffer[] = [];
      const r = await c.run(['sh', '-c', 'printf 0123456789abcdef; printf e >&2'], {
        maxOutputBytes: 10,
        onStdout: (b) => seen.push(b),
      });
      assert.deepEqual([r.truncated, r.stdout.toString(), r.stderr.toString()], [true, '', 'e']);
      assert.equal(Buffer.concat(seen).toString(), '0123456789abcdef');
    } finally {
      c.close();
    }
  });

  it('a malformed EXEC frame gets EINVAL and the agent stays usable', async () => {
    const body = await rawAnswer(encodeFrame(FrameType.Exec, 999_998, Buffer.from([1, 0, 0])), 999_998);
    assert.deepEqual([body.ok, body.code], [false, 'EINVAL']);
    assert.match(String(body.message), /exec frame/);
    await assertStillServes();
  });

  it('values the EXEC frame cannot carry go as the JSON exec op instead', () => {
    assert.ok(encodeExecPayload({ argv: ['true'], timeoutMs: 1000, uid: 0, pty: { cols: 80, rows: 24 } }));
    assert.equal(encodeExecPayload({ argv: ['true'], timeoutMs: 1.5 }), undefined);
    assert.equal(encodeExecPayload({ argv: ['true'], uid: -1 }), undefined);
    assert.equal(encodeExecPayload({ argv: ['true'], pty: { cols: 70_000, rows: 24 } }), undefined);
  });

  it('a hostile agent sending an oversized frame is cut off with a clear error', async () => {
    const evil = join(dir, 'evil.sock');
    const server: Server = createServer((s) => {
      s.once('data', () => {
        const header = Buffer.alloc(9);
        header.writeUInt32BE(5 + 64 * MAX_PAYLOAD, 0);
        header.writeUInt8(FrameType.Out, 4);
        header.writeUInt32BE(1, 5);
        s.write(Buffer.concat([Buffer.from(AGENT_MAGIC), header, Buffer.alloc(1024)]));
      });
    });
    await new Promise<void>((r) => server.listen(evil, r));
    try {
      const t0 = Date.now();
      await assert.rejects(
        AgentClient.connect(evil, { connectTimeoutMs: 5000 }),
        (e: unknown) => e instanceof SandboxError && e.code === 'agent.frame-too-large',
      );
      assert.ok(Date.now() - t0 < 2000);
    } finally {
      server.close();
    }
  });

  it('a guest that never answers gives agent.unresponsive within the deadline', async () => {
    const mute = join(dir, 'mute.sock');
    const server = createServer(() => undefined);
    await new Promise<void>((r) => server.listen(mute, r));
    try {
      const t0 = Date.now();
      await assert.rejects(
        AgentClient.connect(mute, { connectTimeoutMs: 500 }),
        (e: unknown) => e instanceof SandboxError && e.code === 'agent.unresponsive',
      );
      const took = Date.now() - t0;
      assert.ok(took >= 450 && took < 2000, `took ${took} ms`);
    } finally {
      server.close();
    }
  });

  it('a missing socket gives agent.unreachable within the deadline', async () => {
    const t0 = Date.now();
    await assert.rejects(
      AgentClient.connect(join(dir, 'nope.sock'), { connectTimeoutMs: 300 }),
      (e: unknown) => e instanceof SandboxError && e.code === 'agent.unreachable',
    );
    assert.ok(Date.now() - t0 < 2000);
  });

  it('execs, streams, watches and forwards TCP', async () => {
    const c = await AgentClient.connect(sock);
    try {
      const r = await c.run(['sh', '-c', 'echo out; echo err >&2; exit 4']);
      assert.deepEqual([r.exitCode, r.stdout.toString(), r.stderr.toString()], [4, 'out\n', 'err\n']);
      const events: string[] = [];
      const w = await c.files.watch(dir, (e) => events.push(`${e.op}:${e.path}`));
      await c.files.write(join(dir, 'w.txt'), 'x');
      for (let i = 0; i < 50 && !events.includes(`create:${join(dir, 'w.txt')}`); i++) await sleep(20);
      await w.close();
      assert.ok(events.includes(`create:${join(dir, 'w.txt')}`), events.join(' '));
      // TCP to a port on the agent's side (here: this host)
      const echo = createServer((s) => s.pipe(s));
      await new Promise<void>((r) => echo.listen(0, '127.0.0.1', r));
      const port = (echo.address() as { port: number }).port;
      const d = await c.connectTcp(port);
      const got = new Promise<string>((resolve) => d.once('data', (b: Buffer) => resolve(b.toString())));
      d.write('ping-over-agent');
      assert.equal(await got, 'ping-over-agent');
      d.destroy();
      echo.close();
    } finally {
      c.close();
    }
  });

  it('a TCP connect to a port nothing listens on rejects, and nothing else fails', async () => {
    const closed = createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const port = (closed.address() as { port: number }).port;
    await new Promise((r) => closed.close(r));
    const uncaught: unknown[] = [];
    const onUncaught = (e: unknown) => uncaught.push(e);
    process.on('uncaughtException', onUncaught);
    const c = await AgentClient.connect(sock);
    try {
      await assert.rejects(
        c.connectTcp(port),
        (e: unknown) => e instanceof SandboxError && e.code === 'agent.econnrefused',
      );
      await sleep(50);
      assert.deepEqual(uncaught, []);
    } finally {
      process.off('uncaughtException', onUncaught);
      c.close();
    }
  });

  it('a process that never reads stdin is sent 64 MiB: another exec and a kill of it still answer at once', async () => {
    const c = await AgentClient.connect(sock);
    try {
      assert.ok(c.info.features.includes('flow'), c.info.features.join(' '));
      const stuck = c.exec(['sleep', '600'], { stdin: true });
      await stuck.pid;
      assert.equal(stuck.write(Buffer.alloc(64 << 20)), false, 'the write waits for the process');
      await sleep(200);
      const t0 = Date.now();
      assert.equal((await c.run(['echo', 'beside'])).stdout.toString(), 'beside\n');
      await stuck.kill('SIGKILL');
      assert.equal((await stuck.wait()).signal, 'SIGKILL');
      const took = Date.now() - t0;
      assert.ok(took < 1000, `took ${took} ms`);
    } finally {
      c.close();
    }
  });

  it('an older host (no flow control) still streams stdin and output, the reader waiting on a full stream', async () => {
    const s = connect(sock);
    const dec = new FrameDecoder({ expectMagic: AGENT_MAGIC });
    const id = 4242;
    let out = 0;
    const answer = new Promise<Record<string, unknown>>((resolve) => {
      s.on('data', (d: Buffer) => {
        for (const f of dec.push(d)) {
          assert.notEqual(f.type, FrameType.Window, 'no credit frames for a host that did not turn flow control on');
          if (f.id === id && f.type === FrameType.Out) out += f.payload.length;
          if (f.id === id && f.type === FrameType.Res)
            resolve(JSON.parse(f.payload.toString()) as Record<string, unknown>);
        }
      });
    });
    try {
      s.write(HOST_MAGIC);
      s.write(encodeFrame(FrameType.Exec, id, encodeExecPayload({ argv: ['cat'], stdin: true })!));
      // More IN frames than the agent queues for one stream (16) before its reader waits for the process.
      for (let i = 0; i < 40; i++) s.write(encodeFrame(FrameType.In, id, Buffer.alloc(100_000, 0x61)));
      s.write(encodeFrame(FrameType.In, id, Buffer.alloc(0)));
      const res = await answer;
      assert.deepEqual([res.ok, res.exitCode, out], [true, 0, 4_000_000]);
    } finally {
      s.destroy();
    }
  });

  /** A StreamLink that records what a stream sends. */
  function recordingLink(): StreamLink & { ins: number[]; windows: number[] } {
    const ins: number[] = [];
    const windows: number[] = [];
    return {
      ins,
      windows,
      sendIn: (p) => (ins.push(p.length), true),
      sendWindow: (n) => windows.push(n),
      socketDrained: () => Promise.resolve(),
    };
  }

  it('host input: sent within the credit, the rest after WINDOW grants, EOF after the data', async () => {
    const link = recordingLink();
    const input = new StreamInput(link);
    assert.equal(input.write(Buffer.alloc(STREAM_WINDOW + 1000)), false);
    assert.deepEqual(link.ins, [STREAM_WINDOW]);
    input.end();
    assert.deepEqual(link.ins, [STREAM_WINDOW], 'EOF waits behind the queued data');
    let drained = false;
    void input.drained().then(() => (drained = true));
    input.grant(600);
    input.grant(600);
    await sleep(0);
    assert.deepEqual([link.ins, drained], [[STREAM_WINDOW, 600, 400, 0], true]);
    // A guest granting more than it was sent is lying about sizes: refused, and nothing more is sent.
    assert.match(input.grant(STREAM_WINDOW) ?? '', /past the .*window/);
  });

  it('host output: credit goes back once the consumer has taken the data, and a guest past its window is refused', async () => {
    const link = recordingLink();
    const output = new StreamOutput(link);
    let take!: () => void;
    const taken = new Promise<void>((r) => (take = r));
    output.received(STREAM_WINDOW);
    output.consumed(STREAM_WINDOW, taken);
    await sleep(0);
    assert.deepEqual(link.windows, [], 'no credit while the consumer holds the data');
    assert.match(output.received(1) ?? '', /past its .*window/);
    take();
    await sleep(0);
    assert.deepEqual(link.windows, [STREAM_WINDOW]);
  });
});
