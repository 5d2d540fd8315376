/**
 * Pure parts of the virtual kubelet: Pod -> VM request (table-driven), Pod status builders and their diff, the
 * exec query and status wire format, node profiles, and SPDY framing (a client built from the same primitives
 * talks to the server over a loopback byte pipe).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { constants as zc, createDeflate, createInflate } from 'node:zlib';
import { exitStatus, parseExecQuery } from '../../src/sandboxd/vk/exec-stream.js';
import { desiredNode, nodeProfile } from '../../src/sandboxd/vk/node-registration.js';
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

  it('accepts streams, replies, carries data both ways, echoes pings', async () => {
    // A minimal client: one deflate context for its header blocks, one inflate context for the server's.
    const deflate = createDeflate({ dictionary: SPDY3_DICTIONARY });
    const compress = (b: Buffer) =>
      new Promise<Buffer>((resolve) => {
        const out: Buffer[] = [];
        const on = (d: Buffer) => out.push(d);
        deflate.on('data', on);
        deflate.write(b);
        deflate.flush(zc.Z_SYNC_FLUSH, () => {
          deflate.off('data', on);
          resolve(Buffer.concat(out));
        });
      });
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
    const block = await compress(encodeHeaderBlock({ streamtype: 'data', port: '8080', requestid: '0' }));
    const syn = Buffer.alloc(18 + block.length);
    syn.writeUInt16BE(0x8003, 0);
    syn.writeUInt16BE(1, 2);
    syn.writeUInt32BE(10 + block.length, 4);
    syn.writeUInt32BE(1, 8);
    block.copy(syn, 18);
    const data = Buffer.concat([Buffer.from([0, 0, 0, 1, 0, 0, 0, 2]), Buffer.from('hi')]);
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
    deflate.destroy();
    inflate.destroy();
  });
});
