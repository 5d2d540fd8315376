/**
 * The e2b data plane's entry point (`--e2b-sandbox-listen`): what `E2B_SANDBOX_URL` points at (the sandbox named by
 * the `E2b-Sandbox-Id` / `E2b-Sandbox-Port` headers) and what `<port>-<sandboxID>.<domain>` hosts resolve to (signed
 * file URLs, `getHost(port)`). It finds the sandbox's node in the store and forwards the request to that node's
 * data-plane listener (its `envd_addr` from GET /v1/info) with the node's claim id in E2b-Sandbox-Id, streaming
 * both bodies as they come; upgrades (WebSockets to guest ports) are spliced. An unknown sandbox is 502 "… was not
 * found", which the SDKs read as "the sandbox is gone".
 */
import { Agent, createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer, type Server as HttpsServer } from 'node:https';
import { connect as netConnect, type AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { ENVD_PORT } from '../../api/envd.js';
import type { Logger } from '../../log/logger.js';
import { guardRequests, guardUpgrades } from '../../net/guard.js';
import { listenOn, splice, streamingServerOptions } from '../../net/serve.js';
import type { SandboxEntry } from '../sandboxes/entry.js';
import type { SandboxdClient } from '../sandboxes/sandboxd-client.js';
import type { SandboxStore } from '../sandboxes/store.js';
import type { AutoResumer } from './auto-resume.js';
import { SignedUrlIndex } from './signed-urls.js';

export interface RouterOptions {
  store: SandboxStore;
  client: SandboxdClient;
  namespace: string;
  logger: Logger;
  /**
   * Serve HTTPS with this certificate (PEM): the `*.<domain>` wildcard of `--e2b-domain`, since the SDK builds
   * `https://<port>-<id>.<domain>` for envd, signed file URLs and getHost (docs/e2b.md "URLs the SDK builds").
   */
  tls?: { cert: string; key: string };
  /** Resume a paused sandbox with autoResume on a request to it (auto-resume.ts); omitted: never. */
  autoResume?: AutoResumer;
}

const HOP_BY_HOP = ['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'trailer', 'upgrade'];

/** The sandbox id and port a request names (headers first, else a `<port>-<id>.` host). */
export function routeTarget(req: IncomingMessage): { id: string; port: number } | undefined {
  const id = req.headers['e2b-sandbox-id'];
  const port = req.headers['e2b-sandbox-port'];
  if (typeof id === 'string' && id)
    return { id, port: typeof port === 'string' && /^\d{1,5}$/.test(port) ? Number(port) : ENVD_PORT };
  const m = /^(\d{1,5})-([a-z0-9-]+)\./.exec(req.headers.host ?? '');
  return m ? { id: m[2]!, port: Number(m[1]) } : undefined;
}

function notFoundBody(id: string): string {
  return JSON.stringify({ code: 502, message: `The sandbox ${id} was not found`, sandboxId: id });
}

export class SandboxRouter {
  readonly server: Server | HttpsServer;
  private readonly agent = new Agent({ keepAlive: true, maxSockets: 256, keepAliveMsecs: 30_000 });
  /** The data-plane address of each node, by `<node>@<api address>` (asked once, again after a failure). */
  private readonly envd = new Map<string, Promise<string | undefined>>();
  private readonly signed: SignedUrlIndex;

  constructor(private readonly o: RouterOptions) {
    this.signed = new SignedUrlIndex(o.store, o.client, o.namespace);
    const handler = guardRequests(o.logger, 'e2b-router', (req, res) => this.forward(req, res));
    this.server = o.tls
      ? createHttpsServer({ ...streamingServerOptions(), cert: o.tls.cert, key: o.tls.key }, handler)
      : createServer(streamingServerOptions(), handler);
    this.server.on(
      'upgrade',
      guardUpgrades(o.logger, 'e2b-router', (req: IncomingMessage, socket: Duplex, head: Buffer) =>
        this.splice(req, socket, head),
      ),
    );
  }

  listen(host: string, port: number): Promise<AddressInfo> {
    return listenOn(this.server, host, port);
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    this.agent.destroy();
    await new Promise<void>((r) => this.server.close(() => r()));
  }

  /** A signed `/files` URL without a sandbox id (the SDK's uploadUrl / downloadUrl on E2B_SANDBOX_URL). */
  private async signedTarget(req: IncomingMessage): Promise<{ id: string; port: number } | undefined> {
    let url: URL;
    try {
      url = new URL(req.url ?? '/', 'http://router');
    } catch {
      return undefined;
    }
    const e = await this.signed.find(req.method, url);
    return e ? { id: e.name, port: ENVD_PORT } : undefined;
  }

  private envdAddress(e: SandboxEntry): Promise<string | undefined> {
    const k = `${e.node}@${e.address}`;
    let p = this.envd.get(k);
    if (!p) {
      p = this.o.client.call(e.node, e.address, 'GET', '/v1/info').then(
        (info) => (info as { envd_addr?: string }).envd_addr,
        () => undefined,
      );
      this.envd.set(k, p);
      void p.then((a) => a === undefined && this.envd.delete(k));
    }
    return p;
  }

  /** The sandbox, the node's data-plane address and the headers to send it, or an answer already given. */
  private async resolve(
    req: IncomingMessage,
  ): Promise<
    | { ok: true; host: string; port: number; headers: Record<string, string | string[]> }
    | { ok: false; status: number; body: string }
  > {
    const t = routeTarget(req) ?? (await this.signedTarget(req));
    if (!t)
      return {
        ok: false,
        status: 400,
        body: JSON.stringify({
          code: 400,
          message:
            'name the sandbox: E2b-Sandbox-Id header, a <port>-<sandboxID>.<domain> host, or a /files URL signed by a sandbox of this server',
        }),
      };
    const e = this.o.store.get(`${this.o.namespace}/${t.id}`);
    if (!e) return { ok: false, status: 502, body: notFoundBody(t.id) };
    const refused = await this.o.autoResume?.beforeForward(req, e, t.port);
    if (refused) return { ok: false, ...refused };
    const addr = await this.envdAddress(e);
    const m = addr ? /^(.*):(\d+)$/.exec(addr) : null;
    if (!m)
      return {
        ok: false,
        status: 502,
        body: JSON.stringify({
          code: 502,
          message: `node ${e.node} of sandbox ${t.id} serves no data plane (sandboxd --envd-listen)`,
        }),
      };
    const headers: Record<string, string | string[]> = {};
    for (const [k, v] of Object.entries(req.headers)) if (v !== undefined && !HOP_BY_HOP.includes(k)) headers[k] = v;
    headers['e2b-sandbox-id'] = e.claimId;
    headers['e2b-sandbox-port'] = String(t.port);
    return { ok: true, host: m[1]!.replace(/^\[|\]$/g, ''), port: Number(m[2]), headers };
  }

  private async forward(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const r = await this.resolve(req);
    if (!r.ok) {
      res.writeHead(r.status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(r.body) });
      res.end(r.body);
      req.resume();
      return;
    }
    const up = request({
      host: r.host,
      port: r.port,
      method: req.method,
      path: req.url,
      headers: r.headers,
      agent: this.agent,
    });
    up.on('response', (ur) => {
      const h: Record<string, string | string[]> = {};
      for (const [k, v] of Object.entries(ur.headers)) if (v !== undefined && !HOP_BY_HOP.includes(k)) h[k] = v;
      res.writeHead(ur.statusCode ?? 502, h);
      // Headers first: a stream's client learns it started before its first message.
      res.flushHeaders();
      ur.pipe(res);
      ur.on('aborted', () => res.destroy());
    });
    up.on('error', (err) => {
      this.o.logger.debug({ err }, 'e2b router: node request failed');
      if (!res.headersSent) {
        const body = JSON.stringify({ code: 502, message: `the sandbox's node did not answer: ${err.message}` });
        res.writeHead(502, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
        res.end(body);
      } else res.destroy();
    });
    res.on('close', () => {
      if (!res.writableFinished) up.destroy();
    });
    req.pipe(up);
  }

  private async splice(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    let r: Awaited<ReturnType<SandboxRouter['resolve']>>;
    try {
      r = await this.resolve(req);
    } catch (err) {
      this.o.logger.warn({ err }, 'e2b router: resolving an upgrade failed');
      socket.end('HTTP/1.1 502 Bad Gateway\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
      return;
    }
    if (!r.ok) {
      socket.end(
        `HTTP/1.1 ${r.status} Error\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(r.body)}\r\nconnection: close\r\n\r\n${r.body}`,
      );
      return;
    }
    const up = netConnect(r.port, r.host);
    up.on('connect', () => {
      const lines = [`${req.method} ${req.url} HTTP/1.1`];
      for (const [k, v] of Object.entries({
        ...r.headers,
        connection: 'Upgrade',
        upgrade: String(req.headers.upgrade ?? ''),
      }))
        for (const x of Array.isArray(v) ? v : [v]) lines.push(`${k}: ${x}`);
      up.write(`${lines.join('\r\n')}\r\n\r\n`);
      if (head.length) up.write(head);
      splice(up, socket);
    });
    // Until connected, a failure of either side ends both.
    up.once('error', () => socket.destroy());
    socket.once('error', () => up.destroy());
  }
}
