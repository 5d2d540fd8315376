/**
 * `getHost(port)` traffic: an HTTP request for any in-sandbox port other than envd's goes to that port inside the
 * guest over the agent's TCP connect (no network device needed), streamed both ways; WebSocket and other upgrades
 * are spliced at the byte level after their head. Nothing listening there is a 502 naming the port, as e2b answers.
 * Only a sandbox created through the e2b API with public traffic answers without a token (access.ts mayReachPort).
 * The guest's answer is hostile input: a status or header that this server could not send on is a 502, never an
 * exception in a listener (which ended sandboxd).
 */
import {
  request,
  validateHeaderName,
  validateHeaderValue,
  type IncomingMessage,
  type RequestOptions,
  type ServerResponse,
} from 'node:http';
import type { Duplex } from 'node:stream';
import type { Logger } from '../../log/logger.js';
import { splice } from '../../net/serve.js';
import { mayReachPort } from '../../api/envd-access.js';
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

const NO_TOKEN =
  "this sandbox's ports need its access token: send X-Access-Token or E2B-Traffic-Access-Token (create it through the e2b API with network.allowPublicTraffic to serve them publicly)";

/** The guest's response head as this server may send it on, or why it cannot be. */
function guestHead(up: IncomingMessage): { status: number; headers: Record<string, string | string[]> } | string {
  const status = up.statusCode;
  // 1xx other than 101 never reaches 'response'; 101 without an upgrade is not an answer to forward either.
  if (status === undefined || !Number.isInteger(status) || status < 200 || status > 599)
    return `the sandbox's port answered with status ${String(status)}`;
  const headers: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(up.headers)) {
    if (v === undefined || HOP_BY_HOP.has(k)) continue;
    try {
      validateHeaderName(k);
      for (const x of Array.isArray(v) ? v : [v]) validateHeaderValue(k, x);
    } catch {
      return `the sandbox's port answered with an invalid header ${JSON.stringify(k.slice(0, 64))}`;
    }
    headers[k] = v;
  }
  return { status, headers };
}

export function forwardToGuestPort(
  req: IncomingMessage,
  res: ServerResponse,
  sbx: SandboxContext,
  port: number,
  log: Logger,
): void {
  if (!mayReachPort(req.headers, sbx)) {
    sendJsonError(res, 401, NO_TOKEN, { sandboxId: sbx.id, port });
    return;
  }
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
    up.on('error', () => res.destroy());
    const head = guestHead(up);
    if (typeof head === 'string') {
      log.debug({ sandbox: sbx.id, port, problem: head }, 'guest port answer refused');
      up.destroy();
      sendJsonError(res, 502, `${head}; it cannot be forwarded`, { sandboxId: sbx.id, port });
      return;
    }
    try {
      res.writeHead(head.status, head.headers);
    } catch (err) {
      // Whatever else node:http refuses to send: the guest's answer, so a 502, not an exception in this listener.
      log.debug({ err, sandbox: sbx.id, port }, 'guest port answer refused');
      up.destroy();
      sendJsonError(res, 502, `the sandbox's port answered with a head that cannot be forwarded`, {
        sandboxId: sbx.id,
        port,
      });
      return;
    }
    up.pipe(res);
  });
  // A 101 to a request that asked for no upgrade: not an answer this request can take (node:http would leave it
  // unanswered).
  out.on('upgrade', (_up, socket: Duplex) => {
    socket.destroy();
    log.debug({ sandbox: sbx.id, port }, 'guest port answered 101 to a plain request');
    sendJsonError(res, 502, "the sandbox's port switched protocols on a plain request", { sandboxId: sbx.id, port });
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
  if (!mayReachPort(req.headers, sbx)) {
    socket.end('HTTP/1.1 401 Unauthorized\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
    return;
  }
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
