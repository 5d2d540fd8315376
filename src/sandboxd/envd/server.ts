/**
 * The node's data plane: envd for every sandbox this sandboxd holds, on its own listener (`--envd-listen`). A
 * request names its sandbox by the `E2b-Sandbox-Id` header (what the e2b router in front of the nodes sets, and
 * what the SDK sends with E2B_SANDBOX_URL) or by a `<port>-<id>.<domain>` host, and its in-sandbox port by
 * `E2b-Sandbox-Port` (default envd's 49983). Port 49983 is envd: Connect RPCs (process, filesystem), `/files`,
 * `/health`; any other port is forwarded to that port inside the guest (guest-ports.ts). A sandbox this node does
 * not hold is 502 "… was not found", as e2b's edge answers, which the SDKs read as "the sandbox is gone"; a paused one
 * (either mode) is 502 "… is paused" on every port (docs/e2b.md "Data plane (envd)").
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { connectNodeAdapter } from '@connectrpc/connect-node';
import { createContextValues } from '@connectrpc/connect';
import { ENVD_PORT } from '../../api/envd.js';
import { silentLogger, type Logger } from '../../log/logger.js';
import { guardRequests, guardUpgrades } from '../../net/guard.js';
import { requestTarget } from '../../net/request-target.js';
import { listenOn, streamingServerOptions } from '../../net/serve.js';
import type { NodeEngine, SandboxRecord } from '../engine.js';
import { hasAccessToken, isAuthorizedRequest } from '../../api/envd-access.js';
import { sendJsonError } from './errors.js';
import { serveFiles } from './files-http.js';
import { filesystemService } from './filesystem-service.js';
import { Filesystem } from './gen/filesystem.gen.js';
import { Process } from './gen/process.gen.js';
import { forwardToGuestPort, forwardUpgradeToGuestPort } from './guest-ports.js';
import { processService } from './process-service.js';
import { SANDBOX_KEY } from './request-context.js';
import { SandboxContexts, type SandboxContext } from './sandbox-context.js';

export interface EnvdServerOptions {
  engine: NodeEngine;
  logger?: Logger;
  /** Largest file upload (per file, decompressed). @default 1 GiB */
  maxUploadBytes?: number;
  /** Connections open at once (`--envd-max-connections`); past it new ones are closed at once. @default 4096 */
  maxConnections?: number;
  /**
   * How long a request (headers and body) may take to arrive (ms); the answer (a process's output, a download) may
   * stream for longer. @default 30 min: a 1 GiB upload at under 1 MB/s.
   */
  requestTimeoutMs?: number;
}

export const ENVD_DEFAULT_MAX_CONNECTIONS = 4096;
export const ENVD_DEFAULT_REQUEST_TIMEOUT_MS = 30 * 60_000;

/** Largest Connect message (an RPC request); file content goes through /files, which streams. */
const MAX_MESSAGE_BYTES = 1 << 20;

/** The sandbox and port a request is for: headers first, else a `<port>-<id>.` host. */
export function targetOf(req: IncomingMessage): { id: string; port: number } | undefined {
  const hid = req.headers['e2b-sandbox-id'];
  const hport = req.headers['e2b-sandbox-port'];
  if (typeof hid === 'string' && hid) {
    const port = typeof hport === 'string' && /^\d{1,5}$/.test(hport) ? Number(hport) : ENVD_PORT;
    return { id: hid, port };
  }
  const m = /^(\d{1,5})-([^.:]+)\./.exec(req.headers.host ?? '');
  if (m) return { id: m[2]!, port: Number(m[1]) };
  return undefined;
}

export class EnvdServer {
  readonly server: Server;
  private readonly contexts: SandboxContexts;
  private readonly log: Logger;
  private readonly resolved = new WeakMap<IncomingMessage, SandboxContext>();
  private readonly rpc;
  private readonly shutdown = new AbortController();
  /** Requests in flight, by claim id: cut when their sandbox is released or hibernated (`cut`). */
  private readonly inFlight = new Map<string, Set<ServerResponse>>();

  constructor(private readonly opts: EnvdServerOptions) {
    this.log = opts.logger ?? silentLogger;
    // Before the contexts' own listeners (which end the process streams with an error): e2b's streams do not end, their
    // connection drops with the VM, and the SDK then asks /health, finds the sandbox gone and says it "was killed or
    // reached its end of life". Cutting first means no end-stream frame is written ahead of the cut.
    opts.engine.on('released', (rec: SandboxRecord) => this.cut(rec.id));
    opts.engine.on('changed', (rec: SandboxRecord) => {
      if (rec.hibernated) this.cut(rec.id);
    });
    this.contexts = new SandboxContexts(opts.engine);
    this.rpc = connectNodeAdapter({
      routes: (router) => {
        router.service(Process, processService);
        router.service(Filesystem, filesystemService);
      },
      grpc: false,
      grpcWeb: false,
      readMaxBytes: MAX_MESSAGE_BYTES,
      shutdownSignal: this.shutdown.signal,
      contextValues: (req) => createContextValues().set(SANDBOX_KEY, this.resolved.get(req as IncomingMessage)),
      fallback: (_req, res) => sendJsonError(res as ServerResponse, 404, 'no such envd endpoint'),
    });
    this.server = createServer(
      { ...streamingServerOptions(), requestTimeout: opts.requestTimeoutMs ?? ENVD_DEFAULT_REQUEST_TIMEOUT_MS },
      guardRequests(this.log, 'envd', (req, res) => this.handle(req, res)),
    );
    this.server.maxConnections = opts.maxConnections ?? ENVD_DEFAULT_MAX_CONNECTIONS;
    this.server.on(
      'upgrade',
      guardUpgrades(this.log, 'envd', (req: IncomingMessage, socket, head: Buffer) => {
        const sbx = this.lookup(req);
        if (!sbx || sbx.port === ENVD_PORT) {
          socket.end('HTTP/1.1 404 Not Found\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
          return;
        }
        if (this.mayWake(req, sbx.ctx, sbx.port)) {
          socket.pause();
          void this.opts.engine.idle.ensureAwake(sbx.id).then(
            () => {
              socket.resume();
              this.server.emit('upgrade', req, socket, head);
            },
            () => socket.end('HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-length: 0\r\n\r\n'),
          );
          return;
        }
        if (sbx.ctx.record.paused || sbx.ctx.record.hibernated) {
          socket.end('HTTP/1.1 502 Bad Gateway\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
          return;
        }
        forwardUpgradeToGuestPort(req, socket, head, sbx.ctx, sbx.port, this.log);
      }),
    );
  }

  listen(host: string, port: number): Promise<AddressInfo> {
    return listenOn(this.server, host, port);
  }

  async close(): Promise<void> {
    this.shutdown.abort();
    this.contexts.closeAll();
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
  }

  /** Drop the connections of a sandbox's requests in flight: its VM is gone (released) or its agent session is. */
  private cut(id: string): void {
    const live = this.inFlight.get(id);
    if (!live) return;
    this.inFlight.delete(id);
    for (const res of live) res.destroy();
  }

  /**
   * Whether this request wakes its sandbox: it is idle-suspended, and the request is one the node would serve (its
   * token, a valid signed URL, or what the port accepts). An unauthenticated request (a port scan, a tokenless
   * /health) must not make the node spend a VM on someone's sandbox; it gets the paused answer below.
   */
  private mayWake(req: IncomingMessage, ctx: SandboxContext, port: number): boolean {
    return ctx.record.hibernated && ctx.record.idleSuspended === true && isAuthorizedRequest(req, port, ctx);
  }

  private track(id: string, res: ServerResponse): void {
    let live = this.inFlight.get(id);
    if (!live) this.inFlight.set(id, (live = new Set()));
    live.add(res);
    // In flight is in use: a stream held open keeps its sandbox awake (idle.ts).
    const done = this.opts.engine.idle.hold(id);
    res.once('close', () => {
      done();
      live.delete(res);
      if (!live.size && this.inFlight.get(id) === live) this.inFlight.delete(id);
    });
  }

  private lookup(req: IncomingMessage): { ctx: SandboxContext; id: string; port: number } | undefined {
    const t = targetOf(req);
    if (!t) return undefined;
    const ctx = this.contexts.get(t.id);
    return ctx ? { ctx, id: t.id, port: t.port } : undefined;
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const t = targetOf(req);
    if (!t) {
      sendJsonError(res, 400, 'no sandbox named: send E2b-Sandbox-Id or use a <port>-<sandboxID>.<domain> host');
      return;
    }
    const ctx = this.contexts.get(t.id);
    if (!ctx) {
      sendJsonError(res, 502, `The sandbox ${t.id} was not found`, { sandboxId: t.id });
      return;
    }
    if (this.mayWake(req, ctx, t.port)) {
      // Idle-suspended (idle.ts): the request waits for the wake, then is served as if the VM had been running.
      req.pause();
      void this.opts.engine.idle.ensureAwake(t.id).then(
        () => this.handle(req, res),
        (err: unknown) => {
          sendJsonError(res, 503, `The sandbox ${t.id} could not be woken: ${(err as Error).message}`, {
            sandboxId: t.id,
          });
          req.resume();
        },
      );
      return;
    }
    // A paused sandbox answers nothing, as on e2b, where it has no VM until resumed: 502 is what both SDKs take for
    // "not running" (isRunning() false, RPCs `unavailable`). e2b's newest edge says 409 "The sandbox is paused" when
    // it can tell; SDK 2.51 reads a 409 on /health as an error, not as "not running" (docs/e2b.md "Data plane (envd)").
    if (ctx.record.paused || ctx.record.hibernated) {
      sendJsonError(res, 502, `The sandbox ${t.id} is paused`, { sandboxId: t.id });
      req.resume();
      return;
    }
    this.track(t.id, res);
    if (t.port !== ENVD_PORT) {
      forwardToGuestPort(req, res, ctx, t.port, this.log);
      return;
    }
    let url: URL;
    try {
      url = requestTarget(req, (message) => new Error(message));
    } catch (err) {
      sendJsonError(res, 400, (err as Error).message);
      return;
    }
    if (url.pathname === '/health') {
      res.writeHead(204).end();
      return;
    }
    if (url.pathname === '/files') {
      void serveFiles(req, res, url, ctx, { maxUploadBytes: this.opts.maxUploadBytes ?? 1 << 30 }).catch(
        (err: unknown) => {
          this.log.warn({ err, sandbox: t.id }, 'envd /files failed');
          if (!res.headersSent) sendJsonError(res, 500, 'internal error');
          else res.destroy();
        },
      );
      return;
    }
    if (!hasAccessToken(req.headers, ctx.envdToken)) {
      const body = JSON.stringify({
        code: 'unauthenticated',
        message: 'invalid or missing access token (X-Access-Token)',
      });
      res.writeHead(401, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
      res.end(body);
      return;
    }
    this.resolved.set(req, ctx);
    this.rpc(req, res);
  }
}
