/**
 * Small HTTP pieces every handler of the server uses: JSON answers with the headers Kubernetes clients rely on
 * (Content-Type always set: client-go decodes by it), Status failures, Warning headers, and request bodies read
 * with a size cap and a content-type check.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { collectBody } from '../net/body.js';
import { badRequest, requestTimeout, tooLarge, unsupportedMediaType, type StatusFailure } from './status.js';

export const MAX_BODY_BYTES = 1 << 20;
/**
 * How long a request body may take to arrive: kube-apiserver's default request timeout. The server has no
 * whole-request deadline (watches are long), so without this a client could hold a request open by sending its body
 * a byte at a time.
 */
export const BODY_DEADLINE_MS = 60_000;

export function sendJson(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  const payload = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(payload),
    'cache-control': 'no-cache, private',
    ...headers,
  });
  res.end(payload);
}

export function sendStatus(res: ServerResponse, failure: StatusFailure): void {
  if (res.headersSent) {
    // A watch that already streams: an ERROR event is the only way to say it.
    if (!res.writableEnded) res.end(`${JSON.stringify({ type: 'ERROR', object: failure.status })}\n`);
    return;
  }
  sendJson(res, failure.httpCode, failure.status, failure.headers);
}

/** RFC 7234 warning values, as kube-apiserver sends them (`299 - "text"`); kubectl prints them. */
export function warningHeader(warnings: readonly string[]): Record<string, string | string[]> {
  if (!warnings.length) return {};
  return { warning: warnings.map((w) => `299 - ${JSON.stringify(w.replace(/[\r\n]/g, ' '))}`) };
}

/** The JSON request body (undefined when empty); 413 past the cap, 415 for anything but JSON, 400 when malformed. */
export function readJsonBody(
  req: IncomingMessage,
  limit = MAX_BODY_BYTES,
  deadlineMs = BODY_DEADLINE_MS,
): Promise<unknown> {
  const type = (req.headers['content-type'] ?? 'application/json').split(';')[0]!.trim().toLowerCase();
  const declared = Number(req.headers['content-length'] ?? 0);
  return new Promise((resolve, reject) => {
    if (type !== 'application/json' && type !== '') {
      req.resume();
      return reject(unsupportedMediaType(type));
    }
    // A declared length past 8 x the cap is refused at once (the connection is closed, nobody streams us that);
    // below it collectBody drains the body first, so a proxy in front (kube-aggregator) has finished writing when
    // the 413 comes (answered mid-body, its write fails with EPIPE and it turns the 413 into a 503).
    if (declared > limit * 8) {
      req.resume();
      return reject(tooLarge(limit));
    }
    // Past the deadline: the 504 is answered, and the connection is closed a moment later (whatever is still
    // arriving is not read).
    const timer = setTimeout(() => {
      reject(requestTimeout(`the request body did not arrive within ${deadlineMs / 1000} s`));
      setTimeout(() => req.destroy(), 1000).unref();
    }, deadlineMs);
    timer.unref();
    collectBody(req, limit, () => tooLarge(limit)).then(
      (chunks) => {
        clearTimeout(timer);
        const size = chunks.reduce((n, c) => n + c.length, 0);
        if (size === 0) return resolve(undefined);
        try {
          resolve(JSON.parse(Buffer.concat(chunks).toString('utf8')));
        } catch (err) {
          reject(badRequest(`the request body is not valid JSON: ${(err as Error).message}`));
        }
      },
      (err: unknown) => {
        clearTimeout(timer);
        reject(err);
      },
    );
  });
}
