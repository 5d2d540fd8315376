/**
 * The virtual kubelet's WebSocket channel port-forward (docs/virtual-kubelet.md "port-forward: the WebSocket
 * channel protocol") against a hostile client: malformed `port` queries, the most ports one connection can
 * address, frames over the size cap, frames for channels that do not exist or are write-only, bad base64, a
 * client that goes away mid-handshake, one that never reads while the guest floods it, and one that floods a
 * guest that never reads. The kubelet API runs in-process with its real class and an authenticated client; the
 * guest is a stand-in of loopback TCP servers behind `connectTcp` (what the agent's TCP stream gives the node).
 * After each: the process is up, the next good session works, and no guest connection is left open.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { createPki, issueCert, type Pki } from '../../src/cluster/pki.js';
import { silentLogger } from '../../src/log/logger.js';
import type { NodeEngine } from '../../src/sandboxd/engine.js';
import { KubeletServer } from '../../src/sandboxd/vk/kubelet-server.js';
import type { PodLifecycle } from '../../src/sandboxd/vk/pod-lifecycle.js';
import type { PodLogs } from '../../src/sandboxd/vk/pod-logs.js';
import type { Pod } from '../../src/sandboxd/vk/types.js';
import { eventually } from '../support/eventually.js';
import { dialChannels, type ChannelClient } from '../support/port-forward-channel.js';
import { NO_IDLE } from '../support/engine-stubs.js';

/** Guest ports of the stand-in: an echo, a flood that writes as fast as it may, a sink that never reads. */
const ECHO = 1001;
const FLOOD = 1002;
const SINK = 1003;
const REFUSED = 1004;

describe('hostile clients of the WebSocket channel port-forward', () => {
  let dir: string;
  let pki: Pki;
  let serving: { cert: string; key: string };
  let kubelet: KubeletServer;
  let port: number;
  const guests: Server[] = [];
  const guestPorts = new Map<number, number>();
  /** Guest-side sockets still open, and how many bytes the flood has handed to the kernel. */
  const open = new Set<Socket>();
  const stats = { flooded: 0 };
  /** The node's ends of its guest connections (what `connectTcp` gave it). */
  const nodeSide = new Set<Socket>();
  /** The sink's sockets: a socket that never reads never learns its peer has gone. */
  const sinks = new Set<Socket>();

  const guestServer = async (on: (s: Socket) => void): Promise<number> => {
    const srv = createServer((s) => {
      open.add(s);
      s.once('close', () => open.delete(s));
      s.on('error', () => undefined);
      on(s);
    });
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    guests.push(srv);
    return (srv.address() as AddressInfo).port;
  };

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'hostile-vkpf-'));
    pki = await createPki({
      dir,
      apiserverIps: ['127.0.0.1'],
      serviceIp: '10.0.0.1',
      clusterDomain: 'cluster.local',
    });
    serving = await issueCert(dir, pki.ca, {
      name: 'kubelet',
      commonName: 'kubelet',
      ips: ['127.0.0.1'],
      usage: 'server',
    });
    guestPorts.set(ECHO, await guestServer((s) => s.pipe(s)));
    guestPorts.set(
      FLOOD,
      await guestServer((s) => {
        const chunk = Buffer.alloc(64 << 10, 0x61);
        const pump = () => {
          while (!s.destroyed && s.write(chunk)) stats.flooded += chunk.length;
          if (!s.destroyed) {
            stats.flooded += chunk.length;
            s.once('drain', pump);
          }
        };
        pump();
      }),
    );
    guestPorts.set(
      SINK,
      await guestServer((s) => {
        s.pause();
        sinks.add(s);
      }),
    );
    const pod: Pod = {
      metadata: { name: 'p', namespace: 'ns', uid: 'u-1' },
      spec: { nodeName: 'hostile-vk', containers: [{ name: 'c' }] },
    };
    const vm = {
      state: 'running',
      // A few ms of latency, as the agent's stream open has: early frames and early closes land before it.
      connectTcp: (guestPort: number) =>
        new Promise<Socket>((resolve, reject) => {
          const to = guestPorts.get(guestPort);
          setTimeout(() => {
            if (!to) return reject(new Error(`connect ECONNREFUSED 127.0.0.1:${guestPort}`));
            const s = connect(to, '127.0.0.1');
            nodeSide.add(s);
            s.once('close', () => nodeSide.delete(s));
            s.once('connect', () => resolve(s));
            s.once('error', reject);
          }, 5);
        }),
    };
    kubelet = new KubeletServer({
      nodeName: 'hostile-vk',
      listenAddress: '127.0.0.1',
      port: 0,
      tls: { cert: serving.cert, key: serving.key, clientCa: pki.ca.cert },
      engine: { vm: () => vm, get: () => undefined, idle: NO_IDLE } as unknown as NodeEngine,
      pods: {
        pod: (ns: string, name: string) => (ns === 'ns' && name === 'p' ? pod : undefined),
        claimOf: () => ({ id: 'c-1' }),
      } as unknown as PodLifecycle,
      logs: {} as PodLogs,
      logger: silentLogger,
    });
    port = await kubelet.listen();
  });

  after(async () => {
    await kubelet.close();
    for (const g of guests) g.close();
    for (const s of open) s.destroy();
    await rm(dir, { recursive: true, force: true });
  });

  const dial = (query: string, protocols = ['v4.channel.k8s.io']) =>
    dialChannels({
      host: '127.0.0.1',
      port,
      path: `/portForward/ns/p${query}`,
      protocols,
      ca: pki.ca.cert,
      cert: pki.apiserverKubeletClient.cert,
      key: pki.apiserverKubeletClient.key,
    });

  /** The listener still serves a good session, and nothing of the earlier ones is left on the guest side. */
  const stillGood = async () => {
    const c = await dial(`?port=${ECHO}`);
    c.send(0, 'still-good');
    await eventually(() => c.channel(0).toString(), { until: (s) => s === 'still-good', what: 'the echo' });
    c.ws.close();
    await c.closed;
    await eventually(() => open.size, { until: (n) => n === 0, what: 'every guest connection closed' });
  };

  it('malformed or excessive port queries are a 400 Status, before any upgrade', async () => {
    const many = Array.from({ length: 129 }, () => ECHO).join(',');
    const queries = [
      '',
      '?port=',
      '?port=1&port=',
      '?port=1,,2',
      '?port=0',
      '?port=-1',
      '?port=%2B1',
      '?port=0x10',
      '?port=65536',
      '?port=1e3',
      '?port=%20',
      `?port=${'9'.repeat(4000)}`,
      `?port=${','.repeat(4000)}`,
      `?port=${many}`,
      `?${Array.from({ length: 129 }, () => `port=${ECHO}`).join('&')}`,
    ];
    for (const q of queries) {
      const err = (await dial(q).then(
        (c) => {
          c.ws.terminate();
          return assert.fail(`${q.slice(0, 60)} was upgraded`);
        },
        (e: Error) => e,
      )) as Error & { status?: number };
      assert.equal(err.status, 400, `${q.slice(0, 60)}: ${err.message}`);
      assert.match(err.message, /"kind":"Status"/);
    }
    await stillGood();
  });

  it('128 ports on one connection: every error channel gets its message, then the connection closes', async () => {
    const c = await dial(`?port=${Array.from({ length: 128 }, () => REFUSED).join(',')}`);
    assert.equal((await c.closed).code, 1000);
    for (let k = 0; k < 128; k++)
      assert.match(
        c.channel(2 * k + 1).toString(),
        new RegExp(`^error forwarding port ${REFUSED} to pod p, uid u-1: `),
      );
    const e = await dial(`?port=${Array.from({ length: 128 }, () => ECHO).join(',')}`);
    e.send(254, 'last'); // the 128th data channel
    await eventually(() => e.channel(254).toString(), { until: (s) => s === 'last', what: 'the echo on channel 254' });
    e.send(255, 'to the last error channel'); // write-only: dropped
    e.ws.close();
    await e.closed;
    await stillGood();
  });

  it('stray, empty, text and bad-base64 frames are dropped; a frame past the size cap ends only its connection', async () => {
    const c = await dial(`?port=${ECHO}`);
    for (let ch = 1; ch < 256; ch++) c.send(ch, `junk-${ch}`);
    c.ws.send(Buffer.alloc(0));
    // Under the binary protocol a text frame's first byte is its channel too ('0' = 48: no such channel).
    c.ws.send('0text frame on the binary protocol', { binary: false });
    c.send(0, 'after-junk');
    await eventually(() => c.channel(0).toString(), {
      until: (s) => s === 'after-junk',
      what: 'the echo after the junk',
    });
    c.ws.close();

    const b = await dial(`?port=${ECHO}`, ['v4.base64.channel.k8s.io']);
    for (const bad of ['0!!!!', '0abc', '0ab=c', `0${'A'.repeat(5)}`, '9AAAA', '\u00ffAAAA']) b.ws.send(bad);
    b.send(0, 'ok');
    await eventually(() => b.channel(0).toString(), { until: (s) => s === 'ok', what: 'the base64 echo' });
    b.ws.close();

    const big = await dial(`?port=${ECHO}`);
    big.ws.send(Buffer.alloc((16 << 20) + 2));
    const { code } = await big.closed; // 1009 (too big), or 1006 if the close frame lost the race with the reset
    assert.ok(code === 1009 || code === 1006, `closed with ${code}`);
    await stillGood();
  });

  it('clients that go away before, during and right after the upgrade leave nothing behind', async () => {
    for (let i = 0; i < 20; i++) {
      const c = await dial(`?port=${ECHO},${FLOOD},${SINK}`);
      c.send(0, 'x');
      if (i % 2) c.ws.terminate();
      else c.ws.close();
    }
    for (let i = 0; i < 20; i++) {
      const s = connect(port, '127.0.0.1');
      s.on('error', () => undefined);
      s.once('connect', () => s.destroy());
    }
    await stillGood();
    const server = (kubelet as unknown as { server: Server }).server;
    await eventually(() => new Promise<number>((r) => server.getConnections((_e, n) => r(n))), {
      until: (n) => n === 0,
      what: 'no kubelet API connection left',
    });
  });

  it('a client that never reads holds the guest back (bounded memory); a flood into a guest that never reads stops being read', async () => {
    const c: ChannelClient = await dial(`?port=${FLOOD}`);
    const socket = (c.ws as unknown as { _socket: Socket })._socket;
    socket.pause();
    const heapBefore = process.memoryUsage().arrayBuffers;
    // The flood runs until every buffer between it and the paused client is full, then stops. Without the node's
    // backpressure it never would: the node would read it all into its own memory.
    let last = -1;
    await eventually(
      async () => {
        const before = stats.flooded;
        await new Promise((r) => setTimeout(r, 500));
        const steady = stats.flooded === before && before === last;
        last = stats.flooded;
        return steady;
      },
      { timeoutMs: 30_000, until: (steady) => steady, what: 'the flood held back' },
    );
    // What the flood wrote sits in the kernel's socket buffers (loopback autotunes them up to tcp_rmem's max, 32 MiB
    // here); in this process's memory there is at most the node's send window (256 KiB) and TLS records.
    const grown = process.memoryUsage().arrayBuffers - heapBefore;
    assert.ok(grown < 16 << 20, `buffers grew by ${grown} bytes while the guest wrote ${stats.flooded}`);
    c.ws.terminate();

    const s = await dial(`?port=${SINK}`);
    const chunk = Buffer.alloc(1 << 20, 0x62);
    for (let i = 0; i < 64; i++) s.send(0, chunk);
    // Until the client's queue stops moving: what the node has taken and not handed on to the guest, in its memory.
    let held = 0;
    let lastQueued = -1;
    await eventually(
      async () => {
        for (let t = 0; t < 10; t++) {
          for (const n of nodeSide) held = Math.max(held, n.writableLength);
          await new Promise((r) => setTimeout(r, 100));
        }
        const steady = s.ws.bufferedAmount === lastQueued;
        lastQueued = s.ws.bufferedAmount;
        return steady;
      },
      { timeoutMs: 60_000, until: (steady) => steady, what: "the client's queue steady" },
    );
    // A few frames of 1 MiB past the pause (those the WebSocket had already parsed); without backpressure the
    // node would hold all that the guest's kernel does not.
    assert.ok(held < 8 << 20, `the node held ${held} bytes for a guest that reads nothing`);
    assert.ok(lastQueued > 0, 'the client still holds what the node would not take');
    s.ws.terminate();
    for (const g of sinks) g.resume(); // the guest reads at last: what the node wrote, then its end
    await stillGood();
  });
});
