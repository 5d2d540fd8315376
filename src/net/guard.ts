/**
 * The last line of defence of every node:http(s) listener (issue 28, item 1): a request or upgrade handler that
 * throws, or whose promise rejects, must cost one 500 (or one closed socket), never the process. Node ends the
 * process on an uncaught exception and, by default, on an unhandled rejection, and `void this.handle(req, res)`
 * turned every bug on a request path (an unguarded `new URL(req.url)`) into that. Each server keeps its own error
 * answers (Status, `{code, message}`, `{error}`); this only catches what escaped them.
 *
 * Also here: the per-connection rules that keep one client from holding a server's memory or sockets (item 4):
 * pipelined requests are handled one at a time, and an answer given before the request body arrived closes the
 * connection.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Logger } from '../log/logger.js';
import { guardUpgradedSocket } from './serve.js';

type RequestHandler = (req: IncomingMessage, res: ServerResponse) => void | Promise<void>;
type UpgradeHandler = (req: IncomingMessage, socket: Duplex, head: Buffer) => void | Promise<void>;

const INTERNAL = JSON.stringify({ code: 500, message: 'internal error' });

function lastResort(log: Logger, listener: string, req: IncomingMessage, res: ServerResponse, err: unknown): void {
  log.error({ err, listener, method: req.method }, 'request handler failed outside its error handling; answered 500');
  if (res.headersSent || res.destroyed) {
    res.destroy();
    return;
  }
  try {
    res.writeHead(500, {
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(INTERNAL),
      connection: 'close',
    });
    res.end(INTERNAL);
  } catch {
    res.destroy();
  }
}

/**
 * `handle` as a 'request' listener whose throws and rejections are logged and answered 500, and whose answers
 * close the connection when they leave before the request body has arrived (closeIfBodyPending, on every path).
 */
export function guardRequests(log: Logger, listener: string, handle: RequestHandler): RequestHandler {
  return (req, res) => {
    closeEarlyAnswers(req, res);
    try {
      const p = handle(req, res);
      if (p) p.catch((err: unknown) => lastResort(log, listener, req, res, err));
    } catch (err) {
      lastResort(log, listener, req, res, err);
    }
  };
}

/**
 * `handle` as an 'upgrade' listener: the socket gets its error listener first (guardUpgradedSocket), and a throw or
 * rejection is logged and ends the socket with a 500 (or destroys it when the handler already wrote to it).
 */
export function guardUpgrades(log: Logger, listener: string, handle: UpgradeHandler): UpgradeHandler {
  return (req, socket, head) => {
    guardUpgradedSocket(socket);
    const fail = (err: unknown) => {
      log.error({ err, listener }, 'upgrade handler failed outside its error handling; closed the connection');
      if (socket.destroyed) return;
      if (socket.writable && !(socket as { bytesWritten?: number }).bytesWritten)
        socket.end(
          `HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(INTERNAL)}\r\nconnection: close\r\n\r\n${INTERNAL}`,
        );
      else socket.destroy();
    };
    try {
      const p = handle(req, socket, head);
      if (p) p.catch(fail);
    } catch (err) {
      fail(err);
    }
  };
}

/**
 * Call before an answer that may leave before the request body has arrived (an early 4xx): the connection is then
 * closed after the answer instead of kept alive. Otherwise node reads (and discards) the rest of the body to find
 * the next request, and a client sending it a byte at a time holds the connection for as long as it likes.
 */
export function closeIfBodyPending(req: IncomingMessage, res: ServerResponse): void {
  if (!req.complete && hasBody(req) && !res.headersSent) res.setHeader('connection', 'close');
}

/**
 * Whether the request has a body at all. A bodiless request is not `complete` yet while its 'request' event runs
 * (node marks it after the listener returns), so `complete` alone would close every connection answered at once.
 */
function hasBody(req: IncomingMessage): boolean {
  const length = req.headers['content-length'];
  return req.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
}

/**
 * closeIfBodyPending at the moment the answer's head is written, whoever writes it (a handler, a library such as
 * the Connect adapter, node's implicit head on `end()`): a head passed to writeHead is merged with set headers.
 */
function closeEarlyAnswers(req: IncomingMessage, res: ServerResponse): void {
  const writeHead = res.writeHead;
  res.writeHead = function (this: ServerResponse, ...args: unknown[]) {
    closeIfBodyPending(req, this);
    return (writeHead as (...a: unknown[]) => ServerResponse).apply(this, args);
  } as ServerResponse['writeHead'];
}

/**
 * `handle` with a connection's pipelined requests handled one after another: the next one starts when the previous
 * answer has finished (or its connection closed), and the socket is not read meanwhile. Node otherwise dispatches
 * every pipelined request at once and only orders the answers, so one connection could start any number of
 * TokenReviews (or other work) before its first answer. Past `maxQueued` parsed-but-waiting requests the connection
 * is closed: no real client pipelines that deep.
 */
export function oneRequestAtATime(handle: RequestHandler, maxQueued = 32): RequestHandler {
  const queues = new WeakMap<object, { busy: boolean; waiting: Array<() => void> }>();
  return (req, res) => {
    const socket = req.socket;
    let q = queues.get(socket);
    if (!q) {
      q = { busy: false, waiting: [] };
      queues.set(socket, q);
    }
    const queue = q;
    const run = () => {
      queue.busy = true;
      let done = false;
      const next = () => {
        if (done) return;
        done = true;
        queue.busy = false;
        // a closed connection's waiting requests are dropped: nobody could read their answers
        if (socket.destroyed) queue.waiting.length = 0;
        const n = queue.waiting.shift();
        if (n) n();
        else if (!socket.destroyed) socket.resume();
      };
      res.once('finish', next).once('close', next);
      void handle(req, res);
    };
    if (!queue.busy) return run();
    if (queue.waiting.length >= maxQueued) {
      queue.waiting.length = 0;
      socket.destroy();
      return;
    }
    socket.pause();
    queue.waiting.push(run);
  };
}
