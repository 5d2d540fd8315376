/**
 * The claim gateway: a second listener that serves exactly one request, `POST /v1/claim`, with the same body,
 * answers, auth and limits as the API (the handler is SandboxdApi.claim). It exists for latency: node:http's
 * request/response machinery alone costs ~0.28 ms per request on a 2-vCPU VM (bench/sandboxd's floor), above the
 * 0.2 ms a node-local claim is meant to take, while a socket answered directly costs ~0.11 ms. HTTP/1.1 parsing
 * is http-parser-js (docs/dependencies.md), not ours: keep-alive, pipelining (answers in order), chunked or
 * Content-Length bodies, header-size limit. Anything but POST /v1/claim gets a JSON 404/405 naming the API.
 * A bearer token that is none of sandboxd's is a Kubernetes identity, handed to the gateway of gateway/ (when
 * sandboxd runs with --kubeconfig): its claims are authorized by RBAC and recorded as SandboxClaims.
 */
import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { HTTPParser, type HeaderInfo } from 'http-parser-js';
import { SandboxError } from '../errors.js';
import { silentLogger, type Logger } from '../log/logger.js';
import { identify, type AuthConfig } from './auth.js';
import type { KubeClaimGateway } from './gateway/index.js';
import { errorStatus, MAX_BODY_BYTES, parseJsonBody, type SandboxdApi } from './http-api.js';

/** Request line plus headers, at most (a claim needs a few hundred bytes). */
const MAX_HEADER_BYTES = 16 << 10;
const IDLE_TIMEOUT_MS = 90_000;
/** Requests parsed on one connection whose answers are not written yet; past it the connection is answered 429 and closed. */
const MAX_PIPELINED = 32;
const REASONS: Record<number, string> = {
  200: 'OK',
  400: 'Bad Request',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'Not Found',
  405: 'Method Not Allowed',
  409: 'Conflict',
  413: 'Content Too Large',
  429: 'Too Many Requests',
  500: 'Internal Server Error',
  503: 'Service Unavailable',
};

export interface ClaimGatewayOptions {
  api: SandboxdApi;
  auth: AuthConfig;
  /** Claims by Kubernetes identity (a bearer token that is none of sandboxd's): src/sandboxd/gateway. */
  kube?: KubeClaimGateway;
  logger?: Logger;
}

export interface Answer {
  status: number;
  body: unknown;
  /** Seconds, sent as Retry-After (503s). */
  retryAfter?: number;
}

interface Pending {
  method: string;
  path: string;
  authorization: string | undefined;
  keepAlive: boolean;
  chunks: Buffer[];
  size: number;
  tooLarge: boolean;
  started: number;
}

export class ClaimGateway {
  readonly server: Server;
  private readonly log: Logger;
  private readonly sockets = new Set<Socket>();

  constructor(private readonly opts: ClaimGatewayOptions) {
    this.log = opts.logger ?? silentLogger;
    this.server = createServer((socket) => this.serve(socket));
    this.server.maxConnections = 4096;
  }

  listen(host: string, port: number): Promise<AddressInfo> {
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(port, host, () => resolve(this.server.address() as AddressInfo));
    });
  }

  /** Stop listening and drop open connections (keep-alive clients would otherwise hold the close open). */
  close(): Promise<void> {
    const closed = new Promise<void>((r) => this.server.close(() => r()));
    for (const s of this.sockets) s.destroy();
    return closed;
  }

  private serve(socket: Socket): void {
    this.sockets.add(socket);
    socket.once('close', () => this.sockets.delete(socket));
    socket.setNoDelay(true);
    socket.setTimeout(IDLE_TIMEOUT_MS, () => socket.destroy());
    socket.on('error', () => socket.destroy());
    const parser = new HTTPParser(HTTPParser.REQUEST);
    parser.maxHeaderSize = MAX_HEADER_BYTES;
    let req: Pending | undefined;
    // Answers leave in request order, and a connection has one request in work at a time: a pipelined request is
    // answered (its TokenReview started, its body parsed) only once the answer before it is written, and the socket
    // is not read while an answer is pending, so one connection can neither start reviews in parallel nor pile up
    // bodies. An answer known at once (a warm hit, an error) is written at once when nothing is pending before it.
    let queued = 0;
    let queue: Promise<void> = Promise.resolve();
    // Counted after the write: the client is waiting for the answer, not for the bookkeeping.
    const send = (a: Answer, keepAlive: boolean) => {
      if (!socket.destroyed) {
        const payload = JSON.stringify(a.body);
        const retry = a.retryAfter === undefined ? '' : `retry-after: ${a.retryAfter}\r\n`;
        const head = `HTTP/1.1 ${a.status} ${REASONS[a.status] ?? 'Error'}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(payload)}\r\n${retry}`;
        if (keepAlive) socket.write(`${head}\r\n${payload}`);
        else socket.end(`${head}connection: close\r\n\r\n${payload}`);
      }
      this.opts.api.countGatewayRequest(a.status);
    };
    const enqueue = (p: Promise<void>) => {
      queued++;
      socket.pause();
      queue = p
        .catch((err: unknown) => {
          this.log.error({ err }, 'claim listener: answering a request failed');
          socket.destroy();
        })
        .finally(() => {
          queued--;
          if (queued === 0 && !socket.destroyed) socket.resume();
        });
    };
    const reply = (answer: () => Answer | Promise<Answer>, keepAlive: boolean) => {
      if (queued > 0) return enqueue(queue.then(async () => send(await answer(), keepAlive)));
      const a = answer();
      if (a instanceof Promise) enqueue(a.then((x) => send(x, keepAlive)));
      else send(a, keepAlive);
    };
    const refuse = (status: number, error: string) => {
      // The stream cannot be resynchronised (malformed) or is abusive (pipelined too deep): answer after what is
      // queued, then hang up.
      reply(() => ({ status, body: { error } }), false);
      socket.removeAllListeners('data');
    };
    parser[HTTPParser.kOnHeadersComplete] = (info: HeaderInfo) => {
      let authorization: string | undefined;
      for (let i = 0; i < info.headers.length; i += 2)
        if (info.headers[i]!.toLowerCase() === 'authorization') authorization = info.headers[i + 1];
      const url = info.url;
      const q = url.indexOf('?');
      req = {
        method: HTTPParser.methods[info.method] ?? '',
        path: q < 0 ? url : url.slice(0, q),
        authorization,
        keepAlive: info.shouldKeepAlive,
        chunks: [],
        size: 0,
        tooLarge: false,
        started: performance.now(),
      };
    };
    parser[HTTPParser.kOnBody] = (chunk: Buffer, offset: number, length: number) => {
      if (!req || req.tooLarge) return;
      req.size += length;
      if (req.size > MAX_BODY_BYTES) req.tooLarge = true;
      else req.chunks.push(Buffer.from(chunk.subarray(offset, offset + length)));
    };
    parser[HTTPParser.kOnMessageComplete] = () => {
      const r = req;
      req = undefined;
      if (!r) return;
      if (queued >= MAX_PIPELINED) return refuse(429, `more than ${MAX_PIPELINED} pipelined requests pending`);
      const source = socket.remoteAddress;
      reply(() => this.answer(r, source), r.keepAlive);
    };
    socket.on('data', (data: Buffer) => {
      const ret = parser.execute(data);
      if (ret instanceof Error) refuse(400, `malformed HTTP request: ${ret.message}`);
    });
  }

  /** The answer to one request: at once for a redirect or an error; a promise for a claim (on disk, then answered). */
  private answer(r: Pending, source: string | undefined): Answer | Promise<Answer> {
    try {
      if (r.path !== '/v1/claim')
        throw new SandboxError(
          'sandboxd.not-found',
          `no route ${r.path}: this listener serves only POST /v1/claim; use the API address`,
        );
      if (r.method !== 'POST')
        throw new SandboxError('sandboxd.method-not-allowed', `method ${r.method} not allowed on /v1/claim`);
      const who = identify(r.authorization, this.opts.auth);
      if (who?.kind === 'bearer' && this.opts.kube)
        return this.opts.kube.claim(who.token, r.chunks, r.tooLarge, r.started, source);
      if (r.tooLarge)
        throw new SandboxError('sandboxd.bad-request', `invalid request body: larger than ${MAX_BODY_BYTES} bytes`);
      if (!who) throw new SandboxError('sandboxd.unauthorized', 'invalid api token');
      const out = this.opts.api.claimNow(who, parseJsonBody(r.chunks), r.started);
      if ('answer' in out) return { status: 200, body: out.answer };
      return out.pending.then(
        (body) => ({ status: 200, body }),
        (err: unknown) => this.failed(err),
      );
    } catch (err) {
      return this.failed(err);
    }
  }

  private failed(err: unknown): Answer {
    const { status, message } = errorStatus(err);
    if (status >= 500) this.log.error({ err }, 'claim failed');
    return { status, body: { error: message } };
  }
}
