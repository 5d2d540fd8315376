/**
 * Pure parts of the virtual kubelet: Pod -> VM request (table-driven), Pod status builders and their diff, the
 * exec query and status wire format, node profiles, the pod log (CRI records, tail, follow), SPDY framing (a client built from the same primitives
 * talks to the server over a loopback byte pipe), and backpressure through exec and SPDY (a loopback WebSocket and
 * a stand-in for the guest process).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { describe, it } from 'node:test';
import { constants as zc, createDeflate, createInflate } from 'node:zlib';
import { WebSocket, WebSocketServer } from 'ws';
import type { ExecOptions, ExecProcess } from '../../src/guest/index.js';
import { silentLogger } from '../../src/log/logger.js';
import { exitStatus, parseExecQuery, serveExec, type ExecRequest } from '../../src/sandboxd/vk/exec-stream.js';
import { desiredNode, nodeProfile } from '../../src/sandboxd/vk/node-registration.js';
import { PodLogs } from '../../src/sandboxd/vk/pod-logs.js';
import {
  failedStatus,
  runningStatus,
  statusDiffers,
  vmRequestFor,
  waitingStatus,
} from '../../src/sandboxd/vk/pod-spec.js';
import {
  encodeHeaderBlock,
  parseHeaderBlock,
  SpdyServerConnection,
  type SpdyStream,
} from '../../src/sandboxd/vk/spdy.js';
import { SPDY3_DICTIONARY } from '../../src/sandboxd/vk/spdy-dictionary.js';
import type { Pod } from '../../src/sandboxd/vk/types.js';
import { eventually } from '../support/eventually.js';

const TEMPLATES = ['sandbox/minimal', 'sandbox/base', 'sandbox/python'];

function pod(image: string | undefined, annotations: Record<string, string> = {}): Pod {
  return {
    metadata: { name: 'p', namespace: 'ns', uid: 'u1', annotations },
    spec: {
      nodeName: 'n',
      containers: [
        { name: 'main', ...(image ? { image } : {}) },
        { name: 'side', image: 'x' },
      ],
    },
  };
}

describe('vmRequestFor', () => {
  const cases: Array<{ name: string; kind: 'vk-cocoon' | 'sandboxd'; pod: Pod; want: unknown }> = [
    {
      name: 'vk-cocoon: first container image, :latest stripped, lease renewed',
      kind: 'vk-cocoon',
      pod: pod('sandbox/base:latest'),
      want: {
        ok: true,
        request: { key: { template: 'sandbox/base', net: 'none', size: 'small' }, ttlSeconds: 86400, renew: true },
      },
    },
    {
      name: 'vk-cocoon: the adapter annotation wins over the image',
      kind: 'vk-cocoon',
      pod: pod('nginx', { 'cocoonset.cocoonstack.io/image': 'sandbox/minimal' }),
      want: {
        ok: true,
        request: { key: { template: 'sandbox/minimal', net: 'none', size: 'small' }, ttlSeconds: 86400, renew: true },
      },
    },
    {
      name: 'sandboxd: template annotation, net/size annotations, ttl',
      kind: 'sandboxd',
      pod: pod('ignored', {
        'sandbox.cocoonstack.io/template': 'sandbox/python',
        'sandbox.cocoonstack.io/net': 'egress',
        'sandbox.cocoonstack.io/size': 'medium',
        'sandbox.cocoonstack.io/ttl-seconds': '120',
      }),
      want: {
        ok: true,
        request: { key: { template: 'sandbox/python', net: 'egress', size: 'medium' }, ttlSeconds: 120, renew: false },
      },
    },
    {
      name: 'sandboxd: no ttl = 86400; ttl 0 = engine default',
      kind: 'sandboxd',
      pod: pod('sandbox/minimal', { 'sandbox.cocoonstack.io/ttl-seconds': '0' }),
      want: {
        ok: true,
        request: {
          key: { template: 'sandbox/minimal', net: 'none', size: 'small' },
          ttlSeconds: undefined,
          renew: false,
        },
      },
    },
  ];
  for (const c of cases) it(c.name, () => assert.deepEqual(vmRequestFor(c.pod, c.kind, TEMPLATES), c.want));

  it('the idle policy annotation becomes the claim idle_hibernate_seconds (docs/sandboxd.md "Idle suspend")', () => {
    const idle = 'sandbox.cocoonstack.io/idle-hibernate-seconds';
    for (const kind of ['sandboxd', 'vk-cocoon'] as const) {
      const r = vmRequestFor(pod('sandbox/base', { [idle]: '120' }), kind, TEMPLATES);
      assert.equal(r.ok && r.request.idleHibernateSeconds, 120, kind);
    }
    const none = vmRequestFor(pod('sandbox/base', { [idle]: '0' }), 'sandboxd', TEMPLATES);
    assert.equal(none.ok && none.request.idleHibernateSeconds, undefined);
    const bad = vmRequestFor(pod('sandbox/base', { [idle]: 'later' }), 'sandboxd', TEMPLATES);
    assert.deepEqual(bad.ok ? undefined : bad.reason, 'InvalidSandboxRequest');
    assert.match(bad.ok ? '' : bad.message, /idle-hibernate-seconds="later" must be a whole number of seconds/);
    // A warm pool's member waiting for a claim has no policy yet (it would be suspended while it waits).
    const member = pod('sandbox/base', { [idle]: '120' });
    member.metadata.labels = { 'agents.x-k8s.io/warm-pool-sandbox': 'abc123' };
    const waiting = vmRequestFor(member, 'sandboxd', TEMPLATES);
    assert.equal(waiting.ok && waiting.request.idleHibernateSeconds, undefined);
  });

  const bad: Array<{ name: string; kind: 'vk-cocoon' | 'sandboxd'; pod: Pod; reason: string; message: RegExp }> = [
    {
      name: 'an image that names no template',
      kind: 'vk-cocoon',
      pod: pod('nginx:1.27'),
      reason: 'UnknownTemplate',
      message: /image "nginx:1\.27".*known templates: sandbox\/minimal, sandbox\/base, sandbox\/python/,
    },
    {
      name: 'no image at all',
      kind: 'vk-cocoon',
      pod: pod(undefined),
      reason: 'UnknownTemplate',
      message: /names no image/,
    },
    {
      name: 'a negative ttl',
      kind: 'sandboxd',
      pod: pod('sandbox/minimal', { 'sandbox.cocoonstack.io/ttl-seconds': '-5' }),
      reason: 'InvalidSandboxRequest',
      message: /ttl-seconds="-5"/,
    },
    {
      name: 'a bad size',
      kind: 'sandboxd',
      pod: pod('sandbox/minimal', { 'sandbox.cocoonstack.io/size': 'huge' }),
      reason: 'InvalidSandboxRequest',
      message: /size: must be one of/,
    },
    {
      name: 'another runtime on the sandboxd node',
      kind: 'sandboxd',
      pod: pod('sandbox/minimal', { 'sandbox.cocoonstack.io/runtime': 'vk-cocoon' }),
      reason: 'InvalidRuntime',
      message: /serves runtime "sandboxd"/,
    },
  ];
  for (const c of bad)
    it(`refuses ${c.name}`, () => {
      const r = vmRequestFor(c.pod, c.kind, TEMPLATES);
      assert.equal(r.ok, false);
      if (r.ok) return;
      assert.equal(r.reason, c.reason);
      assert.match(r.message, c.message);
    });
});

describe('pod status builders', () => {
  const now = '2026-01-01T00:00:00Z';
  const later = '2026-01-01T00:05:00Z';

  it('running: Ready, podIP, one running container status per container with the claim id', () => {
    const s = runningStatus(pod('sandbox/minimal'), {
      claimId: 'sb_1',
      hostAddress: '10.0.0.1',
      ready: true,
      restartCount: 0,
      now,
    });
    assert.equal(s.phase, 'Running');
    assert.equal(s.podIP, '10.0.0.1');
    assert.equal(s.conditions?.find((c) => c.type === 'Ready')?.status, 'True');
    assert.deepEqual(
      s.containerStatuses?.map((c) => [c.name, c.imageID, c.ready, c.state.running?.startedAt]),
      [
        ['main', 'sandboxd://sb_1', true, now],
        ['side', 'sandboxd://sb_1', true, now],
      ],
    );
  });

  it("a networked VM's pod reports the VM's own address as its IP, the node's as the host's", () => {
    const input = { claimId: 'sb_1', hostAddress: '10.0.0.1', ready: true, restartCount: 0, now };
    const s = runningStatus(pod('sandbox/minimal'), { ...input, podAddress: '10.200.0.6' });
    assert.deepEqual([s.podIP, s.podIPs], ['10.200.0.6', [{ ip: '10.200.0.6' }]]);
    assert.deepEqual([s.hostIP, s.hostIPs], ['10.0.0.1', [{ ip: '10.0.0.1' }]]);
    // The same pod moving to a VM with another address (a vk-cocoon restart) is a status change to write.
    const p = pod('sandbox/minimal');
    p.status = s;
    assert.equal(statusDiffers(p.status, runningStatus(p, { ...input, podAddress: '10.200.0.10' })), true);
  });

  it("keeps other writers' conditions (an eviction's DisruptionTarget) in every status it writes", () => {
    const p = pod('sandbox/minimal');
    const input = { claimId: 'sb_1', hostAddress: '10.0.0.1', ready: true, restartCount: 0, now };
    p.status = runningStatus(p, input);
    const evicted = {
      type: 'DisruptionTarget',
      status: 'True' as const,
      reason: 'EvictionByEvictionAPI',
      message: 'Eviction API: evicting',
      lastTransitionTime: now,
    };
    p.status = { ...p.status, conditions: [...(p.status.conditions ?? []), evicted] };
    for (const s of [
      runningStatus(p, { ...input, now: later }),
      runningStatus(p, { ...input, ready: false, now: later }),
      waitingStatus(p, 'VMStarting', 'starting', later),
      failedStatus(p, 'SandboxGone', 'gone', later),
    ])
      assert.deepEqual(
        s.conditions?.filter((c) => c.type === 'DisruptionTarget'),
        [evicted],
      );
    // Re-rendering the same state with it present is no change to write (it does not fight the apiserver's).
    assert.equal(statusDiffers(p.status, runningStatus(p, { ...input, now: later })), false);
  });

  it('keeps timestamps of an unchanged status, so a re-render does not differ', () => {
    const p = pod('sandbox/minimal');
    p.status = runningStatus(p, { claimId: 'sb_1', hostAddress: '10.0.0.1', ready: true, restartCount: 0, now });
    const again = runningStatus(p, {
      claimId: 'sb_1',
      hostAddress: '10.0.0.1',
      ready: true,
      restartCount: 0,
      now: later,
    });
    assert.equal(statusDiffers(p.status, again), false);
    const newVm = runningStatus(p, {
      claimId: 'sb_2',
      hostAddress: '10.0.0.1',
      ready: true,
      restartCount: 1,
      now: later,
    });
    assert.equal(statusDiffers(p.status, newVm), true);
    assert.equal(newVm.containerStatuses?.[0]?.state.running?.startedAt, later);
    assert.equal(newVm.conditions?.find((c) => c.type === 'Ready')?.lastTransitionTime, now, 'Ready stayed True');
  });

  it('waiting and failed statuses carry the reason where kubectl shows it', () => {
    const w = waitingStatus(pod('nginx'), 'UnknownTemplate', 'no such template', now);
    assert.equal(w.phase, 'Pending');
    assert.equal(w.containerStatuses?.[0]?.state.waiting?.reason, 'UnknownTemplate');
    const p = pod('sandbox/minimal');
    p.status = runningStatus(p, { claimId: 'sb_1', hostAddress: '10.0.0.1', ready: true, restartCount: 2, now });
    const f = failedStatus(p, 'SandboxLeaseExpired', 'lease ended', later);
    assert.equal(f.phase, 'Failed');
    assert.equal(f.reason, 'SandboxLeaseExpired');
    assert.equal(f.containerStatuses?.[0]?.state.terminated?.reason, 'SandboxLeaseExpired');
    assert.equal(f.containerStatuses?.[0]?.restartCount, 2);
    assert.equal(f.containerStatuses?.[0]?.containerID, 'sandboxd://sb_1');
  });

  it('a null in the wanted status differs only from a set value', () => {
    assert.equal(statusDiffers({ phase: 'Running' }, { phase: 'Running', reason: null }), false);
    assert.equal(statusDiffers({ phase: 'Running', reason: 'X' }, { phase: 'Running', reason: null }), true);
  });
});

describe('exec wire format', () => {
  it('parses the kubelet exec query (input/output/error/tty; tty drops stderr)', () => {
    assert.deepEqual(parseExecQuery(new URLSearchParams('command=uname&command=-a&output=1&error=1')), {
      command: ['uname', '-a'],
      stdin: false,
      stdout: true,
      stderr: true,
      tty: false,
    });
    assert.deepEqual(parseExecQuery(new URLSearchParams('command=sh&input=1&output=1&error=1&tty=1')), {
      command: ['sh'],
      stdin: true,
      stdout: true,
      stderr: false,
      tty: true,
    });
    assert.deepEqual(parseExecQuery(new URLSearchParams('command=sh')), {
      error: 'you must specify at least 1 of stdin, stdout, stderr',
    });
  });

  it('reports exit codes as metav1.Status with an ExitCode cause', () => {
    assert.deepEqual(exitStatus(0), { status: 'Success' });
    assert.deepEqual(exitStatus(3).details, { causes: [{ reason: 'ExitCode', message: '3' }] });
    assert.equal(exitStatus(3).reason, 'NonZeroExitCode');
  });
});

describe('node profiles', () => {
  it("match the runtime adapter's nodeSelectors and toleration", () => {
    assert.equal(nodeProfile('vk-cocoon').labels['node.kubernetes.io/instance-type'], 'virtual-node');
    assert.equal(nodeProfile('sandboxd').labels['sandbox.cocoonstack.io/runtime'], 'sandboxd');
    for (const k of ['vk-cocoon', 'sandboxd'] as const)
      assert.equal(nodeProfile(k).taint.key, 'virtual-kubelet.io/provider');
    const n = desiredNode(
      { name: 'n1', kind: 'sandboxd', hostAddress: '10.1.1.1', kubeletPort: 10260, maxPods: 200 },
      '2026-01-01T00:00:00Z',
    );
    assert.equal(n.status?.daemonEndpoints?.kubeletEndpoint?.Port, 10260);
    assert.deepEqual(n.status?.declaredFeatures, ['ExtendWebSocketsToKubelet']);
    assert.equal(n.status?.capacity?.pods, '200');
  });
});

/** A minimal SPDY client: one deflate context for its header blocks (the server keeps one inflate context). */
class SpdyTestClient {
  private readonly deflate = createDeflate({ dictionary: SPDY3_DICTIONARY });

  compress(b: Buffer): Promise<Buffer> {
    return new Promise<Buffer>((resolve) => {
      const out: Buffer[] = [];
      const on = (d: Buffer) => out.push(d);
      this.deflate.on('data', on);
      this.deflate.write(b);
      this.deflate.flush(zc.Z_SYNC_FLUSH, () => {
        this.deflate.off('data', on);
        resolve(Buffer.concat(out));
      });
    });
  }

  /** SYN_STREAM for `id` with a header block compressed in this client's context. */
  async synStream(id: number, headers: Record<string, string>): Promise<Buffer> {
    return synStreamFrame(id, await this.compress(encodeHeaderBlock(headers)));
  }

  close(): void {
    this.deflate.destroy();
  }
}

/** SYN_STREAM for `id` carrying `block` as its (already compressed) header block. */
function synStreamFrame(id: number, block: Buffer): Buffer {
  const syn = Buffer.alloc(18 + block.length);
  syn.writeUInt16BE(0x8003, 0);
  syn.writeUInt16BE(1, 2);
  syn.writeUInt32BE(10 + block.length, 4);
  syn.writeUInt32BE(id, 8);
  block.copy(syn, 18);
  return syn;
}

function dataFrame(id: number, data: Buffer, flags = 0): Buffer {
  const h = Buffer.alloc(8);
  h.writeUInt32BE(id, 0);
  h.writeUInt32BE((flags << 24) | data.length, 4);
  return Buffer.concat([h, data]);
}

describe('SPDY/3.1 server framing', () => {
  it('the dictionary is the 1423-byte SPDY/3 one', () => {
    assert.equal(SPDY3_DICTIONARY.length, 1423);
    assert.equal(SPDY3_DICTIONARY.subarray(4, 11).toString(), 'options');
  });

  it('header blocks round-trip', () => {
    assert.deepEqual(parseHeaderBlock(encodeHeaderBlock({ streamType: 'data', port: '80' })), {
      streamtype: 'data',
      port: '80',
    });
    assert.throws(() => parseHeaderBlock(Buffer.from([0, 0, 0, 2, 0, 0])), /truncated/);
  });

  it('refuses a header block that inflates past its cap (a zlib bomb) instead of inflating it', async () => {
    const client = new SpdyTestClient();
    // 64 MiB of header value compresses to ~64 KiB: a SYN_STREAM well under the control frame limit.
    const block = await client.compress(encodeHeaderBlock({ streamtype: 'data', port: '80', x: 'a'.repeat(64 << 20) }));
    assert.ok(block.length < 1 << 20, `compressed block of ${block.length} bytes`);
    const server = new SpdyServerConnection(() => undefined);
    const outcome = new Promise<Error>((resolve, reject) => {
      server.once('error', resolve);
      server.once('stream', (st: SpdyStream) =>
        reject(new Error(`the block was inflated (${st.headers.x?.length ?? 0}-byte header) and a stream opened`)),
      );
    });
    const closed = new Promise<void>((resolve) => server.once('close', resolve));
    const t0 = Date.now();
    server.push(synStreamFrame(1, block));
    const err = await outcome;
    await closed;
    assert.match(err.message, /header block inflates to more than 65536 bytes/);
    assert.ok(Date.now() - t0 < 1000, `refused after ${Date.now() - t0} ms`);
    client.close();
  });

  it('accepts streams, replies, carries data both ways, echoes pings', async () => {
    const client = new SpdyTestClient();
    const inflate = createInflate({ dictionary: SPDY3_DICTIONARY });
    const fromServer: Buffer[] = [];
    const server = new SpdyServerConnection((b) => fromServer.push(b));
    const streams: SpdyStream[] = [];
    server.on('stream', (s: SpdyStream) => {
      streams.push(s);
      s.reply();
      s.on('data', (d: Buffer) => s.write(Buffer.concat([Buffer.from('echo:'), d])));
      s.on('end', () => s.end());
    });
    const syn = await client.synStream(1, { streamtype: 'data', port: '8080', requestid: '0' });
    const data = dataFrame(1, Buffer.from('hi'));
    const fin = Buffer.from([0, 0, 0, 1, 1, 0, 0, 0]);
    const ping = Buffer.from([0x80, 3, 0, 6, 0, 0, 0, 4, 0, 0, 0, 7]);
    // Deliver in awkward pieces to exercise reassembly.
    const all = Buffer.concat([syn, data, ping, fin]);
    for (let i = 0; i < all.length; i += 5) server.push(all.subarray(i, i + 5));
    for (let i = 0; i < 50 && fromServer.length < 4; i++) await new Promise((r) => setTimeout(r, 10));
    assert.equal(streams.length, 1);
    assert.deepEqual(streams[0]!.headers, { streamtype: 'data', port: '8080', requestid: '0' });
    const out = Buffer.concat(fromServer);
    // SYN_REPLY for stream 1 with an (empty) compressed header block the client can inflate.
    assert.equal(out.readUInt16BE(0), 0x8003);
    assert.equal(out.readUInt16BE(2), 2);
    const replyLen = out.readUInt32BE(4) & 0xffffff;
    assert.equal(out.readUInt32BE(8), 1);
    const replyBlock = await new Promise<Buffer>((resolve) => {
      const got: Buffer[] = [];
      inflate.on('data', (d: Buffer) => got.push(d));
      inflate.write(out.subarray(12, 8 + replyLen));
      inflate.flush(zc.Z_SYNC_FLUSH, () => resolve(Buffer.concat(got)));
    });
    assert.deepEqual(parseHeaderBlock(replyBlock), {});
    const rest = out.subarray(8 + replyLen).toString('latin1');
    assert.ok(rest.includes('echo:hi'), 'echoed data frame');
    assert.ok(out.includes(ping), 'ping echoed');
    server.close();
    client.close();
    inflate.destroy();
  });
});

/** A stand-in for a guest process behind `serveExec`: what the test needs of ExecProcess, the rest never used. */
function fakeProcess(parts: Partial<ExecProcess>): ExecProcess {
  return {
    pid: Promise.resolve(42),
    wait: () => new Promise(() => undefined),
    write: () => true,
    drained: () => Promise.resolve(),
    closeStdin: () => undefined,
    kill: () => Promise.resolve(),
    resize: () => Promise.resolve(),
    ...parts,
  } as unknown as ExecProcess;
}

/** serveExec behind a loopback WebSocket server, and a client connected to it. */
async function execSession(
  exec: (argv: readonly string[], opts: ExecOptions) => ExecProcess,
  req: Partial<ExecRequest>,
): Promise<{ client: WebSocket; close: () => Promise<void> }> {
  const protocol = 'v5.channel.k8s.io';
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0, handleProtocols: () => protocol });
  await new Promise<void>((r) => wss.once('listening', r));
  const request: ExecRequest = { command: ['x'], stdin: false, stdout: true, stderr: false, tty: false, ...req };
  wss.on('connection', (ws) => serveExec(ws, { exec }, request, silentLogger));
  const client = new WebSocket(`ws://127.0.0.1:${(wss.address() as AddressInfo).port}/`, protocol);
  await new Promise<void>((resolve, reject) => {
    client.once('open', resolve);
    client.once('error', reject);
  });
  return {
    client,
    close: async () => {
      client.terminate();
      for (const c of wss.clients) c.terminate();
      await new Promise((r) => wss.close(r));
    },
  };
}

describe('backpressure through exec and port-forward', () => {
  const MiB = 1 << 20;

  it('exec: stdin the process has not taken stops the WebSocket from being read', async () => {
    let delivered = 0;
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    const proc = fakeProcess({
      // Every write stays queued (the process reads nothing) until released.
      write: (b) => {
        delivered += Buffer.byteLength(b);
        return false;
      },
      drained: () => released,
    });
    const { client, close } = await execSession(() => proc, { stdin: true });
    try {
      const chunk = Buffer.concat([Buffer.of(0), Buffer.alloc(64 << 10, 0x61)]);
      for (let i = 0; i < 256; i++) client.send(chunk); // 16 MiB of stdin
      await new Promise((r) => setTimeout(r, 500));
      assert.ok(delivered <= 2 * MiB, `${delivered} bytes of stdin taken from the client while the process read none`);
      release();
      await eventually(() => delivered, { until: (n) => n === 256 * (64 << 10), what: 'all stdin once read' });
    } finally {
      await close();
    }
  });

  it('exec: output the client does not read holds the process back', async () => {
    const chunk = Buffer.alloc(64 << 10, 0x62);
    let acked = 0;
    const total = 1024; // 64 MiB
    const exec = (_argv: readonly string[], opts: ExecOptions) => {
      // The agent's side: send the next chunk only once the last one was taken (its credit).
      void (async () => {
        for (let i = 0; i < total; i++) {
          await opts.onStdout?.(chunk);
          acked++;
        }
      })();
      return fakeProcess({});
    };
    const { client, close } = await execSession(exec, {});
    try {
      client.pause();
      await new Promise((r) => setTimeout(r, 1000));
      assert.ok(acked < total / 2, `${acked} of ${total} chunks taken while the client read nothing`);
      client.resume();
      await eventually(() => acked, { timeoutMs: 20_000, until: (n) => n === total, what: 'all output once read' });
    } finally {
      await close();
    }
  });

  it('SPDY: a stream whose reader is full pauses the transport until it is read', async () => {
    const client = new SpdyTestClient();
    const events: string[] = [];
    const server = new SpdyServerConnection({
      write: (_b, done) => done(),
      pause: () => events.push('pause'),
      resume: () => events.push('resume'),
    });
    let stream: SpdyStream | undefined;
    server.on('stream', (s: SpdyStream) => (stream = s));
    server.push(await client.synStream(1, { streamtype: 'data', port: '80' }));
    for (let i = 0; i < 64; i++) server.push(dataFrame(1, Buffer.alloc(16 << 10)));
    await eventually(() => events, { until: (e) => e.includes('pause'), what: 'the transport paused' });
    assert.deepEqual(events, ['pause']);
    let read = 0;
    stream!.on('data', (b: Buffer) => (read += b.length));
    await eventually(() => events, { until: (e) => e.at(-1) === 'resume', what: 'the transport resumed' });
    assert.equal(read, 64 * (16 << 10));
    server.close();
    client.close();
  });

  it('SPDY: a stream write completes once the transport has taken its frames', async () => {
    const client = new SpdyTestClient();
    const taken: Array<() => void> = [];
    const server = new SpdyServerConnection({
      write: (_b, done) => taken.push(done),
      pause: () => undefined,
      resume: () => undefined,
    });
    let stream: SpdyStream | undefined;
    server.on('stream', (s: SpdyStream) => (stream = s));
    server.push(await client.synStream(1, { streamtype: 'data', port: '80' }));
    await eventually(() => stream, { until: (s) => s !== undefined, what: 'the stream' });
    let written = false;
    stream!.write(Buffer.alloc(100 << 10), () => (written = true)); // two DATA frames
    await eventually(() => taken.length, { until: (n) => n === 2, what: 'two frames handed to the transport' });
    taken.shift()!();
    await new Promise((r) => setTimeout(r, 20));
    assert.equal(written, false, 'the write completed before the transport took its last frame');
    taken.shift()!();
    await eventually(() => written, { until: (w) => w, what: 'the write callback' });
    server.close();
    client.close();
  });
});

describe('pod logs', () => {
  it('serves CRI records with tail and timestamps, and follows appended lines until aborted', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sbx-logs-'));
    try {
      const logs = new PodLogs(dir);
      const file = logs.path('ns', 'p', 'u1');
      logs.event(file, 'one');
      logs.append(file, 'stdout', 'two\npartial');
      const read = async (q: Parameters<PodLogs['serve']>[2]) => {
        const out = new PassThrough();
        let text = '';
        out.on('data', (b: Buffer) => (text += b.toString()));
        await logs.serve(file, out, q);
        return text;
      };
      assert.equal(await read({}), '[sandboxd] one\ntwo\npartial');
      assert.match(await read({ tailLines: 1, timestamps: true }), /^\d{4}-\d\d-\d\dT[\d:.]+Z partial$/);
      const ctrl = new AbortController();
      const out = new PassThrough();
      let followed = '';
      out.on('data', (b: Buffer) => (followed += b.toString()));
      const following = logs.serve(file, out, { follow: true, tailLines: 0, signal: ctrl.signal });
      await new Promise((r) => setTimeout(r, 100));
      logs.event(file, 'three');
      await eventually(() => followed, { until: (f) => f === '[sandboxd] three\n', what: 'the appended line' });
      ctrl.abort();
      await following;
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
