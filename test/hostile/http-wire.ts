/**
 * Raw bytes to a listener of the registry (http-registry.ts), over TCP or TLS: what a hostile client sends is not
 * what node's http client would let a test send (bad request lines, duplicate lengths, broken chunking).
 */
import { connect as tcp, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';

export interface Exchange {
  /** Everything the server sent. */
  data: string;
  /** Whether the server closed (or reset) the connection before we let go of it. */
  closedByServer: boolean;
  ms: number;
}

export function open(port: number, tls: boolean): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = tls
      ? tlsConnect({ port, host: '127.0.0.1', rejectUnauthorized: false, ALPNProtocols: ['http/1.1'] })
      : tcp(port, '127.0.0.1');
    s.once(tls ? 'secureConnect' : 'connect', () => resolve(s));
    s.once('error', reject);
  });
}

/**
 * Send `chunks` (a number is a pause in ms), then wait up to `holdMs` for the server to close the connection, and
 * close it ourselves if it has not.
 */
export async function exchange(
  port: number,
  tls: boolean,
  chunks: ReadonlyArray<string | Buffer | number>,
  holdMs = 300,
): Promise<Exchange> {
  const t0 = Date.now();
  const s = await open(port, tls);
  let data = '';
  let closed = false;
  s.on('data', (d: Buffer) => {
    if (data.length < 1 << 20) data += d.toString('latin1');
  });
  s.on('error', () => undefined);
  const done = new Promise<void>((r) => s.once('close', () => r()));
  s.once('close', () => (closed = true));
  for (const c of chunks) {
    if (closed) break;
    if (typeof c === 'number') await new Promise((r) => setTimeout(r, c));
    else s.write(c);
  }
  const closedByServer = await Promise.race([
    done.then(() => true),
    new Promise<boolean>((r) => setTimeout(() => r(false), holdMs)),
  ]);
  s.destroy();
  await done;
  return { data, closedByServer, ms: Date.now() - t0 };
}

/** The status of a well-formed request (a fresh connection each time). */
export function status(
  port: number,
  tls: boolean,
  req: { method: string; path: string },
  headers: Record<string, string> = {},
): Promise<number> {
  return new Promise((resolve, reject) => {
    const r = (tls ? httpsRequest : httpRequest)(
      {
        host: '127.0.0.1',
        port,
        method: req.method,
        path: req.path,
        headers,
        agent: false,
        rejectUnauthorized: false,
        timeout: 10_000,
      },
      (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      },
    );
    r.on('timeout', () => r.destroy(new Error(`no answer to ${req.method} ${req.path} within 10 s`)));
    r.on('error', reject);
    r.end();
  });
}

/** Header lines for `headers` (CRLF-terminated). */
export const headerLines = (headers: Record<string, string> = {}) =>
  Object.entries(headers)
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join('');
