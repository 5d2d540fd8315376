/**
 * Port-forward over the Kubernetes WebSocket *channel* protocol, as the kubelet serves it
 * (cri-streaming `portforward/websocket.go` on apiserver `wsstream`): what @kubernetes/client-node's PortForward
 * (and so the sandboxd TS SDK) speaks. One WebSocket carries the ports of its `port` query (`?port=8080,9090`,
 * the parameter the apiserver derives from the client's `ports`); the k-th port gets channel 2k for data (both
 * ways) and 2k+1 for errors (node -> client only). Each message is one channel byte and its payload (binary
 * frames), or, under `v4.base64.channel.k8s.io`, the channel as the ASCII digit `'0' + ch` followed by the payload
 * in base64 (text frames). The node first writes the port as 2 bytes little-endian on both channels of each port,
 * then opens `127.0.0.1:<port>` inside the guest (through the agent, as the SPDY path does) and copies bytes;
 * a failure is written as text on the error channel. Like the kubelet: a frame for a channel past the last, or
 * for an error channel, is dropped; an empty frame is skipped; the connection closes (1000) once every port's
 * guest connection has ended; a client's close ends them all. See docs/virtual-kubelet.md "port-forward: the
 * WebSocket channel protocol".
 */
import type { Duplex } from 'node:stream';
import type { WebSocket } from 'ws';
import type { Logger } from '../../log/logger.js';
import type { PortForwardTarget } from './port-forward.js';

/** The subprotocols the kubelet's port-forward accepts besides none at all (which means binary). */
export const PORT_FORWARD_CHANNEL_PROTOCOLS = ['v4.channel.k8s.io', 'v4.base64.channel.k8s.io'] as const;

/**
 * One connection forwards at most this many ports: the channel byte (0-255) addresses 128 data/error pairs, so a
 * port past that could never be written to. (The kubelet takes any number and leaves the rest unreachable.)
 */
export const MAX_CHANNEL_PORTS = 128;

/** Guest bytes sent but not yet written to the client's connection, per port, before the guest is not read. */
const SEND_WINDOW = 256 << 10;

/** The ports of a port-forward WebSocket request, parsed as the kubelet's `NewV4Options` does; else an error. */
export function parseChannelPorts(q: URLSearchParams): { ports: number[] } | { error: string } {
  const values = q.getAll('port');
  if (!values.length) return { error: 'query parameter "port" is required' };
  const ports: number[] = [];
  for (const v of values) {
    if (!v) return { error: 'query parameter "port" cannot be empty' };
    for (const p of v.split(',')) {
      // strconv.ParseUint(p, 10, 16): decimal digits only, at most 65535.
      const n = /^\d{1,5}$/.test(p) ? Number(p) : NaN;
      if (!(n <= 65535)) return { error: `unable to parse ${JSON.stringify(p.slice(0, 32))} as a port` };
      if (n < 1) return { error: `port ${JSON.stringify(p)} must be > 0` };
      if (ports.length === MAX_CHANNEL_PORTS)
        return { error: `at most ${MAX_CHANNEL_PORTS} ports per connection (the channel byte addresses no more)` };
      ports.push(n);
    }
  }
  return { ports };
}

/** The subprotocol the kubelet would pick: the client's first offer it supports; none offered means binary. */
export function pickChannelProtocol(offered: readonly string[]): string | undefined {
  if (!offered.length) return '';
  return offered.find((p) => (PORT_FORWARD_CHANNEL_PROTOCOLS as readonly string[]).includes(p));
}

const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

interface PortPair {
  port: number;
  tcp?: Duplex;
  /** Client bytes that arrived before the guest connection was open. */
  early: Buffer[];
  done: boolean;
}

/** Serve the channel protocol on an open WebSocket until every port's guest connection has ended. */
export function servePortForwardChannels(
  ws: WebSocket,
  protocol: string,
  ports: readonly number[],
  target: PortForwardTarget,
  podDesc: string,
  log: Logger,
): void {
  const base64 = protocol === 'v4.base64.channel.k8s.io';
  let paused = 0;
  const holdClient = () => {
    if (paused++ === 0) ws.pause();
  };
  const releaseClient = () => {
    if (--paused === 0) ws.resume();
  };
  const send = (channel: number, payload: Buffer, done?: () => void): void => {
    if (ws.readyState !== ws.OPEN) {
      done?.();
      return;
    }
    // Go's string('0'+num) on a byte: the sum wraps at 256 and is sent as that code point, UTF-8 encoded.
    if (base64)
      ws.send(String.fromCharCode((48 + channel) & 0xff) + payload.toString('base64'), { binary: false }, () =>
        done?.(),
      );
    else ws.send(Buffer.concat([Buffer.of(channel), payload]), { binary: true }, () => done?.());
  };

  const pairs: PortPair[] = ports.map((port) => ({ port, early: [], done: false }));
  pairs.forEach((p, i) => {
    const prefix = Buffer.alloc(2);
    prefix.writeUInt16LE(p.port);
    send(2 * i, prefix);
    send(2 * i + 1, prefix);
  });

  let closed = false;
  const finish = (p: PortPair, i: number, error?: string): void => {
    if (p.done) return;
    p.done = true;
    if (p.early.length) {
      p.early = [];
      releaseClient();
    }
    if (error) send(2 * i + 1, Buffer.from(`error forwarding port ${p.port} to pod ${podDesc}: ${error}`));
    if (pairs.every((q) => q.done) && ws.readyState === ws.OPEN) ws.close(1000);
  };

  ws.on('message', (raw: Buffer) => {
    if (raw.length === 0) return;
    const channel = base64 ? (raw[0]! - 48) & 0xff : raw[0]!;
    if (channel >= 2 * pairs.length || channel % 2 === 1) return; // no such channel, or write-only: dropped
    let payload = raw.subarray(1);
    if (base64) {
      const text = payload.toString('latin1');
      if (!BASE64.test(text)) {
        log.debug({ channel, bytes: payload.length }, 'port-forward: a frame that is not base64 dropped');
        return;
      }
      payload = Buffer.from(text, 'base64');
    }
    const p = pairs[channel / 2]!;
    if (p.done || !payload.length) return;
    if (!p.tcp) {
      // Held (and the client not read) until the guest connection opens, as the kubelet's pipe blocks its reader.
      if (!p.early.length) holdClient();
      p.early.push(payload);
      return;
    }
    if (!p.tcp.write(payload)) {
      holdClient();
      p.tcp.once('drain', releaseClient);
    }
  });
  const closeAll = (): void => {
    if (closed) return;
    closed = true;
    for (const p of pairs) {
      p.done = true;
      p.tcp?.destroy();
    }
  };
  ws.on('close', closeAll);
  ws.on('error', closeAll);

  pairs.forEach((p, i) => {
    target.connectTcp(p.port).then(
      (tcp) => {
        if (closed || p.done) {
          tcp.destroy();
          return;
        }
        p.tcp = tcp;
        if (p.early.length) {
          const early = p.early;
          p.early = [];
          let full = false;
          for (const b of early) full = !tcp.write(b);
          if (full) tcp.once('drain', releaseClient);
          else releaseClient();
        }
        let inFlight = 0;
        tcp.on('data', (b: Buffer) => {
          inFlight += b.length;
          if (inFlight > SEND_WINDOW) tcp.pause();
          send(2 * i, b, () => {
            inFlight -= b.length;
            if (inFlight <= SEND_WINDOW && tcp.isPaused() && !closed) tcp.resume();
          });
        });
        tcp.once('end', () => {
          tcp.end();
          finish(p, i);
        });
        tcp.once('error', (err: Error) => {
          tcp.destroy();
          finish(p, i, err.message);
        });
        tcp.once('close', () => finish(p, i));
      },
      (err: unknown) => {
        log.debug({ port: p.port, err }, 'port-forward connect failed');
        finish(p, i, err instanceof Error ? err.message : String(err));
      },
    );
  });
}
