/**
 * `getHost(port)` traffic: an HTTP request for any in-sandbox port other than envd's goes to that port inside the
 * guest over the agent's TCP connect (no network device needed), streamed both ways; WebSocket and other upgrades
 * are spliced at the byte level after their head. Nothing listening there is a 502 naming the port, as e2b answers.
 */
import { request, type IncomingMessage, type RequestOptions, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Logger } from '../../log/logger.js';
import { splice } from '../../net/serve.js';
import { sendJsonError } from './errors.js';
import type { SandboxContext } from './sandbox-context.js';

const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'transfer-encoding',
  'te',
  'trailer',
  'upgrade',
  'e2b-sandbox-id',
  'e2b-sandbox-port',
]);

/** node:http's client calls these on its socket; the agent's TCP stream has no socket options to set. */
function asSocket(d: Duplex): Duplex {
  const s = d as Duplex & Record<string, unknown>;
  for (const m of ['setTimeout', 'setNoDelay', 'setKeepAlive', 'ref', 'unref'])
    if (typeof s[m] !== 'function') s[m] = () => s;
  return d;
}

export function forwardToGuestPort(
  req: IncomingMessage,
  res: ServerResponse,
  sbx: SandboxContext,
  port: number,
  log: Logger,
): void {
  const headers: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(req.headers)) if (v !== undefined && !HOP_BY_HOP.has(k)) headers[k] = v;
  const out = request({
    method: req.method,
    path: req.url,
    headers: { ...headers, connection: 'close' },
    createConnection: (_opts: unknown, cb: (err: Error | null, s?: Duplex) => void) => {
      let agent;
      try {
        agent = sbx.agent();
      } catch (err) {
        cb(err as Error);
        return undefined;
      }
      agent.connectTcp(port).then(
        (d) => cb(null, asSocket(d)),
        (err: Error) => cb(err),
      );
      return undefined;
    },
  } as unknown as RequestOptions);
  out.on('response', (up) => {
    const h: Record<string, string | string[]> = {};
    for (const [k, v] of Object.entries(up.headers)) if (v !== undefined && !HOP_BY_HOP.has(k)) h[k] = v;
    res.writeHead(up.statusCode ?? 502, h);
    up.pipe(res);
  });
  out.on('error', (err) => {
    log.debug({ err, sandbox: sbx.id, port }, 'guest port request failed');
    if (!res.headersSent)
      sendJsonError(res, 502, `The sandbox ${sbx.id} is running but port ${port} is not open`, {
        sandboxId: sbx.id,
        port,
      });
    else res.destroy();
  });
  res.on('close', () => out.destroy());
  req.pipe(out);
}

export function forwardUpgradeToGuestPort(
  req: IncomingMessage,
  socket: Duplex,
  head: Buffer,
  sbx: SandboxContext,
  port: number,
  log: Logger,
): void {
  let agent;
  try {
    agent = sbx.agent();
  } catch {
    socket.end('HTTP/1.1 502 Bad Gateway\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
    return;
  }
  agent.connectTcp(port).then(
    (up) => {
      const lines = [`${req.method} ${req.url} HTTP/1.1`];
      for (let i = 0; i < req.rawHeaders.length; i += 2) {
        const k = req.rawHeaders[i]!;
        if (!/^e2b-sandbox-/i.test(k)) lines.push(`${k}: ${req.rawHeaders[i + 1]}`);
      }
      up.write(`${lines.join('\r\n')}\r\n\r\n`);
      if (head.length) up.write(head);
      splice(up, socket);
    },
    (err: unknown) => {
      log.debug({ err, sandbox: sbx.id, port }, 'guest port upgrade failed');
      socket.end('HTTP/1.1 502 Bad Gateway\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
    },
  );
}
