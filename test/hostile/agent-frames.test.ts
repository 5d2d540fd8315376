/**
 * The host side of the agent protocol against a hostile guest (test/hostile/agent-fake-guest.ts): frames of every
 * wrong shape and size, no `flow`, floods, lies about sizes, handlers that throw. For each, the host process does
 * not crash (nothing uncaught), what it buffers stays bounded, and the client either keeps working or fails that
 * VM's connection cleanly (agent.protocol, every pending call rejected). Seeded and bounded (SBX_HOSTILE_LONG=1 for
 * many more cases).
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import fc from 'fast-check';
import { SandboxError } from '../../src/errors.js';
import {
  AGENT_MAGIC,
  AgentClient,
  encodeFrame,
  FrameDecoder,
  FrameType,
  MAX_PAYLOAD,
  type Frame,
} from '../../src/guest/index.js';
import { STREAM_WINDOW } from '../../src/guest/flow.js';
import { crashesDuring, FakeGuest, frameHeader, LONG, SEED, type FakeGuestOptions } from './agent-fake-guest.js';

const guests: FakeGuest[] = [];
after(async () => {
  await Promise.all(guests.map((g) => g.close()));
});

async function guest(opts: FakeGuestOptions): Promise<FakeGuest> {
  const g = await FakeGuest.start(opts);
  guests.push(g);
  return g;
}

const isCode = (code: string) => (e: unknown) => e instanceof SandboxError && e.code === code;

/** The client failed this VM cleanly: closed, and a new call is refused at once with the same error. */
function assertFailedCleanly(c: AgentClient): void {
  assert.equal(c.closed, true, 'the connection of a guest that broke the protocol is closed');
  assert.throws(() => c.start('ping', {}), isCode('agent.protocol'));
}

/** Wrong shapes of a JSON payload, and things that are not JSON at all. */
const WRONG_JSON: Array<[string, string | Buffer]> = [
  ['null', 'null'],
  ['a number', '1'],
  ['a string', '"ok"'],
  ['an array', '[true]'],
  ['true', 'true'],
  ['an empty object', '{}'],
  ['ok as a string', '{"ok":"true"}'],
  ['ok null', '{"ok":null}'],
  ['not JSON', '{ok:true'],
  ['empty', ''],
  ['binary', Buffer.from([0, 0xff, 0xfe, 0x80])],
  ['a 1 MiB string', JSON.stringify('x'.repeat(MAX_PAYLOAD - 2))],
  ['deep nesting', '['.repeat(100_000)],
];

describe('hostile guest: RES frames', () => {
  for (const [what, payload] of WRONG_JSON) {
    it(`a RES of ${what} fails that VM's connection, and nothing escapes`, async () => {
      const g = await guest({ script: (req, s) => void s.frame(FrameType.Res, req.id, payload) });
      let c: AgentClient | undefined;
      const crashes = await crashesDuring(async () => {
        c = await AgentClient.connect(g.path, { connectTimeoutMs: 5000 });
        await assert.rejects(c.ping(2000), isCode('agent.protocol'));
      });
      assert.deepEqual(crashes, []);
      assertFailedCleanly(c!);
    });
  }

  it("a well-formed error answer is that call's error, and the connection goes on", async () => {
    let n = 0;
    const g = await guest({
      script: (req, s) =>
        n++ === 0
          ? void s.json(FrameType.Res, req.id, { ok: false, code: 'E'.repeat(50), message: 'm'.repeat(100_000) })
          : s.ok(req.id),
    });
    const c = await AgentClient.connect(g.path);
    await assert.rejects(c.ping(2000), (e: unknown) => e instanceof SandboxError && e.message.length < 2000);
    await c.ping(2000);
    c.close();
  });

  it('a hello answer of the wrong shape is a protocol error, not a host with NaN for a version', async () => {
    for (const hello of [null, { protocol: '1', version: 'v', pid: 1 }, { protocol: 1, version: 2, pid: 1 }]) {
      const g = await guest({ hello: (id, s) => void s.json(FrameType.Res, id, { ok: true, ...hello }) });
      const crashes = await crashesDuring(() =>
        assert.rejects(AgentClient.connect(g.path, { connectTimeoutMs: 3000 }), isCode('agent.protocol')),
      );
      assert.deepEqual(crashes, []);
    }
  });

  it('a guest without flow control is refused: nothing but the socket would hold its output back', async () => {
    const g = await guest({ features: ['exec', 'files', 'tcp'] });
    await assert.rejects(
      AgentClient.connect(g.path, { connectTimeoutMs: 3000 }),
      (e: unknown) => e instanceof SandboxError && e.code === 'agent.version' && /flow/.test(e.message),
    );
  });
});

describe('hostile guest: operation results and events', () => {
  const stat = { path: '/f', name: 'f', type: 'file', size: 1, mode: 0o644, mtimeMs: 0, uid: 0, gid: 0 };
  const badStats: Array<[string, Record<string, unknown>]> = [
    ['a size with a newline', { ...stat, size: '1\n' }],
    ['a negative size', { ...stat, size: -1 }],
    ['a fractional size', { ...stat, size: 1.5 }],
    ['a size past 2^53', { ...stat, size: 2 ** 60 }],
    ['an unknown type', { ...stat, type: 'fifo' }],
    ['no path', { ...stat, path: undefined }],
    ['a path of 100 KiB', { ...stat, path: `/${'a'.repeat(100 << 10)}` }],
    ['a uid of -1', { ...stat, uid: -1 }],
    ['mtime as a string', { ...stat, mtimeMs: 'yesterday' }],
    ['metadata that is not a map', { ...stat, metadata: ['k', 'v'] }],
    ['a metadata value that is not a string', { ...stat, metadata: { k: 5 } }],
    ['a metadata value of 64 KiB', { ...stat, metadata: { k: 'v'.repeat(64 << 10) } }],
    [
      '10 000 metadata pairs',
      { ...stat, metadata: Object.fromEntries(Array.from({ length: 10_000 }, (_, i) => [`k${i}`, 'v'])) },
    ],
  ];
  for (const [what, answer] of badStats) {
    it(`file.stat answered with ${what} is a protocol error, never a value handed on`, async () => {
      const g = await guest({
        script: (req, s) =>
          req.op === 'file.stat' ? void s.json(FrameType.Res, req.id, { ok: true, ...answer }) : s.ok(req.id),
      });
      const c = await AgentClient.connect(g.path);
      const crashes = await crashesDuring(() => assert.rejects(c.files.stat('/f'), isCode('agent.protocol')));
      assert.deepEqual(crashes, []);
      assertFailedCleanly(c);
    });
  }

  it('an exec whose events or result have the wrong shape fails cleanly', async () => {
    const cases: Array<(id: number, s: import('./agent-fake-guest.js').GuestSession) => void> = [
      (id, s) => void s.frame(FrameType.Evt, id, 'null'),
      (id, s) => void s.json(FrameType.Evt, id, { type: 'started', pid: 'one' }),
      (id, s) => void s.json(FrameType.Evt, id, { type: 'started', pid: -5 }),
      (id, s) => void s.json(FrameType.Res, id, { ok: true, exitCode: 'zero' }),
    ];
    for (const send of cases) {
      const g = await guest({ script: (req, s) => (req.op === 'exec' ? send(req.id, s) : s.ok(req.id)) });
      const c = await AgentClient.connect(g.path);
      const crashes = await crashesDuring(async () => {
        const p = c.exec(['true']);
        await assert.rejects(p.wait(), isCode('agent.protocol'));
      });
      assert.deepEqual(crashes, []);
      assertFailedCleanly(c);
    }
  });

  it('a handler that throws fails its own operation only; the VM keeps answering', async () => {
    const g = await guest({
      script: (req, s) => {
        if (req.op !== 'exec') return s.ok(req.id);
        s.json(FrameType.Evt, req.id, { type: 'started', pid: 7 });
        s.frame(FrameType.Out, req.id, 'boom');
        s.json(FrameType.Res, req.id, { ok: true, exitCode: 0 });
      },
    });
    const c = await AgentClient.connect(g.path);
    const crashes = await crashesDuring(async () => {
      const p = c.exec(['x'], {
        onStdout: () => {
          throw new Error('a consumer that fails on this output');
        },
      });
      await assert.rejects(p.wait(), /a consumer that fails/);
    });
    assert.deepEqual(crashes, []);
    assert.equal(c.closed, false);
    await c.ping(2000);
    assert.ok(
      g.requests.some((r) => r.op === 'cancel'),
      'the guest is told to stop the operation whose consumer failed',
    );
    c.close();
  });
});

describe('hostile guest: sizes, credit and floods', () => {
  it('output past the stream window (a guest ignoring flow control) ends that connection', async () => {
    const g = await guest({
      script: (req, s) => {
        if (req.op !== 'exec') return s.ok(req.id);
        s.json(FrameType.Evt, req.id, { type: 'started', pid: 7 });
        const chunk = Buffer.alloc(64 << 10, 0x61);
        for (let i = 0; i < 64; i++) s.frame(FrameType.Out, req.id, chunk); // 4 MiB, 16 windows
      },
    });
    const c = await AgentClient.connect(g.path);
    let held = 0;
    const crashes = await crashesDuring(async () => {
      const p = c.exec(['cat'], {
        collect: false,
        onStdout: (b) => {
          held += b.length;
          return new Promise(() => undefined); // never consumed: no credit may go back
        },
      });
      await assert.rejects(p.wait(), isCode('agent.protocol'));
    });
    assert.deepEqual(crashes, []);
    assert.ok(held <= STREAM_WINDOW, `the host took ${held} bytes of one stream past its window`);
    assertFailedCleanly(c);
  });

  it('a WINDOW grant beyond what the host sent (a lie about sizes) ends the connection', async () => {
    const g = await guest({
      script: (req, s) => {
        if (req.op !== 'file.write') return s.ok(req.id);
        const b = Buffer.alloc(4);
        b.writeUInt32BE(0xffff_ffff, 0);
        s.frame(FrameType.Window, req.id, b);
      },
    });
    const c = await AgentClient.connect(g.path);
    const crashes = await crashesDuring(() =>
      assert.rejects(c.files.write('/f', Buffer.alloc(1 << 20)), isCode('agent.protocol')),
    );
    assert.deepEqual(crashes, []);
    assertFailedCleanly(c);
  });

  it('a frame header announcing more than the limit ends the connection before anything is buffered', async () => {
    const g = await guest({ script: (req, s) => void s.raw(frameHeader(FrameType.Out, req.id, 0xffff_fff0)) });
    const c = await AgentClient.connect(g.path);
    const crashes = await crashesDuring(() => assert.rejects(c.ping(2000), isCode('agent.frame-too-large')));
    assert.deepEqual(crashes, []);
    assert.equal(c.closed, true);
  });

  it('a frame trickled a byte at a time costs linear time, not a copy of everything before it per byte', () => {
    const frame = encodeFrame(FrameType.Out, 1, Buffer.alloc(256 << 10, 0x63));
    const dec = new FrameDecoder({ expectMagic: AGENT_MAGIC });
    const t0 = Date.now();
    const frames: Frame[] = [...dec.push(Buffer.from(AGENT_MAGIC))];
    for (let i = 0; i < frame.length && Date.now() - t0 < 5000; i++) frames.push(...dec.push(frame.subarray(i, i + 1)));
    const ms = Date.now() - t0;
    assert.equal(frames.length, 1, `decoded ${frames.length} frames in ${ms} ms`);
    assert.equal(frames[0]!.payload.length, 256 << 10);
    assert.ok(ms < 2000, `decoding took ${ms} ms`);
  });

  it('frame types a guest never sends end the connection, whatever their id', async () => {
    for (const type of [0, FrameType.Req, FrameType.In, FrameType.Hello, FrameType.Exec, 10, 255]) {
      const g = await guest({ script: (req, s) => void s.frame(type, req.id + 1000, 'x') });
      const c = await AgentClient.connect(g.path);
      const crashes = await crashesDuring(() => assert.rejects(c.ping(2000), isCode('agent.protocol')));
      assert.deepEqual(crashes, [], `type ${type}`);
    }
  });

  it('a flood of frames for ids nobody waits for costs nothing lasting: the VM still answers', async () => {
    const g = await guest({
      script: (req, s) => {
        const junk = Buffer.alloc(1024, 0x62);
        for (let i = 0; i < (LONG ? 200_000 : 20_000); i++) {
          s.frame(FrameType.Out, 900_000 + i, junk);
          s.frame(FrameType.Evt, 900_000 + i, '{"type":"fs","op":"write","path":"/x"}');
        }
        s.ok(req.id);
      },
    });
    const c = await AgentClient.connect(g.path);
    const before = process.memoryUsage().heapUsed;
    const crashes = await crashesDuring(() => c.ping(30_000));
    assert.deepEqual(crashes, []);
    assert.equal(c.closed, false);
    assert.ok(process.memoryUsage().heapUsed - before < 256 << 20, 'the flood is not held');
    c.close();
  });

  it('random frame sequences (seeded): nothing escapes, and the client works or failed cleanly', async () => {
    const frameArb = fc.record({
      type: fc.oneof(
        fc.constantFrom(FrameType.Res, FrameType.Evt, FrameType.Out, FrameType.Err, FrameType.Window),
        fc.integer({ min: 0, max: 255 }),
      ),
      /** 0: the request's own id; otherwise an unrelated one. */
      idDelta: fc.oneof(fc.constant(0), fc.integer({ min: -3, max: 3 }), fc.integer({ min: 0, max: 0xffff_ffff })),
      payload: fc.oneof(
        fc.jsonValue().map((v) => JSON.stringify(v) ?? ''),
        fc
          .record({ ok: fc.boolean(), size: fc.oneof(fc.integer(), fc.double(), fc.string()) })
          .map((v) => JSON.stringify(v)),
        fc
          .record({ type: fc.constantFrom('started', 'fs', 'connected', 'x'), pid: fc.anything() })
          .map((v) => JSON.stringify(v) ?? ''),
        fc.uint8Array({ maxLength: 64 }).map((a) => Buffer.from(a)),
        fc.integer({ min: 0, max: 0xffff_ffff }).map((n) => {
          const b = Buffer.alloc(4);
          b.writeUInt32BE(n, 0);
          return b;
        }),
      ),
    });
    let script: Array<{ type: number; idDelta: number; payload: string | Buffer }> = [];
    const g = await guest({
      script: (req, s) => {
        if (req.op === 'ping') return s.ok(req.id);
        for (const f of script) s.frame(f.type, (req.id + f.idDelta) >>> 0, f.payload);
      },
    });
    await fc.assert(
      fc.asyncProperty(
        fc.array(frameArb, { minLength: 1, maxLength: 12 }),
        fc.constantFrom('exec', 'stat', 'read'),
        async (frames, op) => {
          script = frames;
          const c = await AgentClient.connect(g.path);
          const crashes = await crashesDuring(async () => {
            const call =
              op === 'exec'
                ? c.exec(['x'], { timeoutMs: 100 }).wait()
                : op === 'stat'
                  ? c.files.stat('/x')
                  : c.files.read('/x', { timeoutMs: 300 });
            const timeout = new Promise((r) => setTimeout(r, 400));
            await Promise.race([call.catch(() => undefined), timeout]);
          }, 10);
          assert.deepEqual(crashes, []);
          if (!c.closed)
            await c.ping(2000); // still working
          else
            assert.throws(
              () => c.start('ping', {}),
              (e: unknown) => e instanceof SandboxError,
            );
          c.close();
        },
      ),
      { seed: SEED, numRuns: LONG ? 2000 : 60, endOnFailure: true },
    );
  });
});
