/**
 * `kubectl port-forward` into a microVM. kubectl 1.36 tunnels SPDY through a WebSocket (subprotocol
 * `SPDY/3.1+portforward.k8s.io`; each binary message carries raw SPDY bytes), and the apiserver proxies that
 * WebSocket to a kubelet that declares `ExtendWebSocketsToKubelet`. Inside, the portforward.k8s.io protocol:
 * per forwarded connection the client opens two streams with headers `streamtype: error|data`, `port`,
 * `requestid`; once both exist the node connects to `127.0.0.1:<port>` inside the guest (through the agent) and
 * copies bytes; a failure is written as text to the error stream (k8s.io/cri-streaming portforward/httpstream.go).
 * A plain `Upgrade: SPDY/3.1` request (older clients) gets the same protocol over the raw socket. Both directions
 * honour backpressure: `pipe` between the SPDY stream and the guest's TCP stream (flow-controlled by the agent).
 */
import type { Duplex } from 'node:stream';
import type { WebSocket } from 'ws';
import type { Logger } from '../../log/logger.js';
import { RstStatus, SpdyServerConnection, type SpdyStream } from './spdy.js';

export const PORT_FORWARD_PROTOCOLS = ['SPDY/3.1+portforward.k8s.io'] as const;
export const PORT_FORWARD_SPDY_PROTOCOL = 'portforward.k8s.io';

export interface PortForwardTarget {
  connectTcp(port: number, host?: string): Promise<Duplex>;
}

/** Streams that have not found their pair in this long are failed, as the kubelet does. */
const PAIR_TIMEOUT_MS = 30_000;

interface Pair {
  data?: SpdyStream;
  error?: SpdyStream;
  timer: NodeJS.Timeout;
}

/** Serve the portforward.k8s.io protocol on a SPDY connection until it closes. */
export function servePortForwardSpdy(conn: SpdyServerConnection, target: PortForwardTarget, log: Logger): void {
  const pairs = new Map<string, Pair>();
  conn.on('error', (err: Error) => log.debug({ err }, 'port-forward SPDY connection error'));
  conn.on('close', () => {
    for (const p of pairs.values()) clearTimeout(p.timer);
    pairs.clear();
  });
  conn.on('stream', (s: SpdyStream) => {
    const type = s.headers.streamtype;
    const port = Number(s.headers.port);
    if ((type !== 'error' && type !== 'data') || !Number.isInteger(port) || port < 1 || port > 65535) {
      s.reset(RstStatus.refusedStream);
      return;
    }
    s.reply();
    s.on('error', () => undefined);
    const requestId = s.headers.requestid ?? String(type === 'error' ? s.id : s.id - 2);
    let pair = pairs.get(requestId);
    if (!pair) {
      const timer = setTimeout(() => {
        pairs.delete(requestId);
        const p = pair!;
        p.error?.end(`timed out waiting for the streams of request ${requestId}`);
        p.data?.reset();
      }, PAIR_TIMEOUT_MS);
      pair = { timer };
      pairs.set(requestId, pair);
    }
    if (pair[type]) {
      s.reset(RstStatus.protocolError);
      return;
    }
    pair[type] = s;
    if (pair.data && pair.error) {
      clearTimeout(pair.timer);
      pairs.delete(requestId);
      void forward(pair.data, pair.error, port, target, log);
    }
  });
}

async function forward(
  data: SpdyStream,
  error: SpdyStream,
  port: number,
  target: PortForwardTarget,
  log: Logger,
): Promise<void> {
  error.resume(); // the client half-closes it at once; nothing to read
  let tcp: Duplex;
  try {
    tcp = await target.connectTcp(port);
  } catch (err) {
    const msg = `error forwarding port ${port} to pod: ${(err as Error).message}`;
    log.debug({ port, err }, 'port-forward connect failed');
    error.end(msg);
    data.reset();
    return;
  }
  tcp.on('error', (err) => {
    error.end(`error forwarding port ${port}: ${err.message}`);
    data.reset();
  });
  data.on('close', () => tcp.destroy());
  data.pipe(tcp);
  tcp.pipe(data);
  tcp.once('end', () => error.end());
}

/** WebSocket tunnel: binary messages are the SPDY byte stream in both directions. */
export function servePortForward(
  ws: WebSocket,
  _protocol: string,
  target: PortForwardTarget,
  _query: URLSearchParams,
  log: Logger,
): void {
  const conn = new SpdyServerConnection({
    write: (b, done) => {
      if (ws.readyState === ws.OPEN) ws.send(b, { binary: true }, () => done());
      else done();
    },
    pause: () => ws.pause(),
    resume: () => ws.resume(),
  });
  servePortForwardSpdy(conn, target, log);
  ws.on('message', (b: Buffer) => conn.push(Buffer.from(b)));
  ws.on('close', () => conn.close());
  ws.on('error', () => conn.close());
  conn.on('close', () => {
    if (ws.readyState === ws.OPEN) ws.close(1000);
  });
}

/** Raw SPDY over the upgraded socket (the 101 response was already written). */
export function servePortForwardOnSocket(socket: Duplex, head: Buffer, target: PortForwardTarget, log: Logger): void {
  const conn = new SpdyServerConnection({
    write: (b, done) => {
      if (socket.destroyed) done();
      else socket.write(b, () => done());
    },
    pause: () => socket.pause(),
    resume: () => socket.resume(),
  });
  servePortForwardSpdy(conn, target, log);
  if (head.length) conn.push(head);
  socket.on('data', (b: Buffer) => conn.push(b));
  socket.on('close', () => conn.close());
  socket.on('error', () => conn.close());
  conn.on('close', () => socket.destroy());
}
