/**
 * The HTTPS server of the conversion webhook: `POST /convert` (ConversionReview v1/v1beta1), `GET /healthz`.
 * No client certificates are asked for (docs/api.md "Conversion webhook"). `setCertificate` swaps the serving
 * certificate at run time (cert-rotation.ts): new handshakes get the new one, open connections keep theirs.
 */
import { createServer, type Server } from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { httpErrorOf } from '../../error-http.js';
import { SandboxError } from '../../errors.js';
import type { Logger } from '../../log/logger.js';
import { failureReview, handleConversionReview, type ConversionReviewResponseBody } from './conversion-review.js';

export const CONVERT_PATH = '/convert';
/**
 * The largest ConversionReview accepted. A single object is at most 1.5 MiB (etcd's request limit), but a LIST
 * through a non-storage version arrives as one review of every item (unpaginated from the watch cache), so the
 * cap is sized for whole lists at the scale this operator is built for: 2 000 objects of 16 KiB each. Anything
 * the server buffers it must also parse and answer, so 128 MiB (the old cap) let a few concurrent requests from
 * anyone who can reach the port exhaust the heap. `--webhook-max-body-bytes` raises it for larger clusters.
 */
export const DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024;

export interface TlsMaterial {
  certPem: string;
  keyPem: string;
}

export interface ConversionWebhookServerOptions {
  port: number;
  /** Listen address; default all interfaces. */
  host?: string;
  tls: TlsMaterial;
  logger: Logger;
  maxBodyBytes?: number;
}

export interface ConversionWebhookServer {
  /** The bound port (useful with `port: 0`). */
  readonly port: number;
  /** Throws (and keeps serving the current one) when the pair does not load. */
  setCertificate(tls: TlsMaterial): void;
  close(): Promise<void>;
}

function send(
  res: ServerResponse,
  status: number,
  body: string,
  type = 'application/json',
  extra: Record<string, string> = {},
): void {
  res.writeHead(status, { 'Content-Type': type, 'Content-Length': Buffer.byteLength(body), ...extra });
  res.end(body);
}

/**
 * The body, or 'too-large' as soon as it is known to exceed `limit` (from Content-Length, before reading, or
 * while streaming). What is left of an oversized body is discarded unbuffered, so the answer reaches the client.
 */
function readBody(req: IncomingMessage, limit: number): Promise<Buffer | 'too-large'> {
  if (Number(req.headers['content-length'] ?? 0) > limit) return Promise.resolve('too-large');
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        chunks.length = 0;
        req.off('data', onData);
        req.resume();
        resolve('too-large');
        return;
      }
      chunks.push(chunk);
    };
    req.on('data', onData);
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

export async function startConversionWebhookServer(
  opts: ConversionWebhookServerOptions,
): Promise<ConversionWebhookServer> {
  const log = opts.logger;
  const limit = opts.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const path = (req.url ?? '').split('?')[0];
    if (path === '/healthz' || path === '/readyz') {
      send(res, 200, 'ok', 'text/plain');
      return;
    }
    if (path !== CONVERT_PATH) throw new SandboxError('webhook.not-found', `no handler for ${path}`);
    if (req.method !== 'POST') throw new SandboxError('webhook.method-not-allowed', 'use POST');
    const started = process.hrtime.bigint();
    const body = await readBody(req, limit);
    if (body === 'too-large') {
      const refused = failureReview(
        `request body exceeds ${limit} bytes; start the operator with a larger --webhook-max-body-bytes`,
      );
      // Not kept alive: the rest of the body is discarded unbuffered and the connection closed after this answer.
      send(res, 200, JSON.stringify(refused), 'application/json', { Connection: 'close' });
      log.warn({ limit }, 'conversion review refused: request body too large');
      return;
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(body.toString('utf8'));
    } catch (err) {
      parsed = err;
    }
    const review: ConversionReviewResponseBody =
      parsed instanceof SyntaxError
        ? failureReview(`request body is not valid JSON: ${parsed.message}`)
        : handleConversionReview(parsed);
    send(res, 200, JSON.stringify(review));
    const result = review.response.result;
    const fields = {
      uid: review.response.uid,
      objects: review.response.convertedObjects?.length,
      durationMs: Number(process.hrtime.bigint() - started) / 1e6,
    };
    if (result.status === 'Success') log.debug(fields, 'conversion review served');
    else log.warn({ ...fields, reason: result.message }, 'conversion review failed');
  };

  const secureContext = (tls: TlsMaterial) => ({ cert: tls.certPem, key: tls.keyPem, minVersion: 'TLSv1.2' as const });
  const server: Server = createServer(secureContext(opts.tls), (req, res) => {
    handle(req, res).catch((err: unknown) => {
      const { status } = httpErrorOf('webhook', err);
      // A 5xx says no more than that: its message may hold what a caller of this port should not see.
      if (status >= 500) log.error({ err }, 'conversion webhook request failed');
      const error = status >= 500 || !(err instanceof Error) ? 'internal error' : err.message;
      if (!res.headersSent) send(res, status, JSON.stringify({ error }));
      else res.destroy();
    });
  });
  server.on('tlsClientError', (err) => log.debug({ err }, 'webhook TLS handshake failed'));

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, opts.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  log.info({ port, path: CONVERT_PATH }, 'conversion webhook listening');

  return {
    port,
    setCertificate(tls: TlsMaterial): void {
      server.setSecureContext(secureContext(tls));
    },
    close(): Promise<void> {
      return new Promise((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
}
