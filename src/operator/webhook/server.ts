/**
 * The HTTPS server of the conversion webhook: `POST /convert` (ConversionReview v1/v1beta1), `GET /healthz`.
 * No client certificates are required (spec §11). `setCertificate` swaps the serving certificate at run time
 * (cert-rotation.ts): new handshakes get the new one, open connections keep theirs.
 */
import { createServer, type Server } from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from '../../log/logger.js';
import { failureReview, handleConversionReview, type ConversionReviewResponseBody } from './conversion-review.js';

export const CONVERT_PATH = '/convert';
/** ConversionReviews of large lists can be big; the apiserver itself caps requests at 3 MiB per object. */
const DEFAULT_MAX_BODY_BYTES = 128 * 1024 * 1024;

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

function send(res: ServerResponse, status: number, body: string, type = 'application/json'): void {
  res.writeHead(status, { 'Content-Type': type, 'Content-Length': Buffer.byteLength(body) });
  res.end(body);
}

function readBody(req: IncomingMessage, limit: number): Promise<Buffer | 'too-large'> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        resolve('too-large');
        req.destroy();
        return;
      }
      chunks.push(chunk);
    });
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
    if (path !== CONVERT_PATH) {
      send(res, 404, JSON.stringify({ error: `no handler for ${path}` }));
      return;
    }
    if (req.method !== 'POST') {
      send(res, 405, JSON.stringify({ error: 'use POST' }));
      return;
    }
    const started = process.hrtime.bigint();
    const body = await readBody(req, limit);
    let review: ConversionReviewResponseBody;
    if (body === 'too-large') {
      review = failureReview(`request body exceeds ${limit} bytes`);
    } else {
      let parsed: unknown;
      try {
        parsed = JSON.parse(body.toString('utf8'));
      } catch (err) {
        parsed = err;
      }
      review =
        parsed instanceof SyntaxError
          ? failureReview(`request body is not valid JSON: ${parsed.message}`)
          : handleConversionReview(parsed);
    }
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
      log.error({ err }, 'conversion webhook request failed');
      if (!res.headersSent) send(res, 500, JSON.stringify({ error: 'internal error' }));
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
