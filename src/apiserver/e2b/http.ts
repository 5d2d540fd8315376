/**
 * The e2b API's HTTP conventions: every error is `{code, message}` with the same HTTP status (both SDKs branch on
 * one or the other), request bodies are JSON objects of at most 1 MiB (413 past it; an empty body is `{}`), and
 * query values are read as the SDKs encode them.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { collectBody } from '../../net/body.js';
import { sendJson } from '../http.js';

export const MAX_BODY_BYTES = 1 << 20;

export class E2bError extends Error {
  constructor(
    readonly status: number,
    message: string,
    /** Extra response headers (Retry-After, Should-Retry). */
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }
}

export const notFound = (id: string) => new E2bError(404, `sandbox "${id}" not found`);
export const badRequest = (message: string) => new E2bError(400, message);

export { sendJson };

export function sendError(res: ServerResponse, err: E2bError): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  sendJson(res, err.status, { code: err.status, message: err.message }, err.headers);
}

export function noContent(res: ServerResponse): void {
  res.writeHead(204).end();
}

/** The body as a JSON object: `{}` when empty; 413 over 1 MiB; 400 when it is not a JSON object. */
export async function readJson(req: IncomingMessage): Promise<Record<string, unknown>> {
  const chunks = await collectBody(
    req,
    MAX_BODY_BYTES,
    () => new E2bError(413, `request body is larger than ${MAX_BODY_BYTES} bytes`),
  );
  const text = Buffer.concat(chunks).toString('utf8');
  if (!text.trim()) return {};
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (err) {
    throw badRequest(`invalid request body: ${(err as Error).message}`);
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v))
    throw badRequest('invalid request body: not a JSON object');
  return v as Record<string, unknown>;
}

export function optionalInt(v: unknown, field: string, min: number, max = Number.MAX_SAFE_INTEGER): number | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max)
    throw badRequest(`${field}: must be an integer from ${min} to ${max}`);
  return v;
}

export function optionalBool(v: unknown, field: string): boolean | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'boolean') throw badRequest(`${field}: must be a boolean`);
  return v;
}

export function stringMap(v: unknown, field: string): Record<string, string> {
  if (v === undefined || v === null) return {};
  if (typeof v !== 'object' || Array.isArray(v)) throw badRequest(`${field}: must be an object of strings`);
  for (const [k, x] of Object.entries(v as Record<string, unknown>))
    if (typeof x !== 'string') throw badRequest(`${field}.${k}: must be a string`);
  return v as Record<string, string>;
}

/**
 * The `metadata` list filter as both SDKs send it: `encodeURIComponent` on each key and value, joined as a form,
 * then URL-encoded again as the query value (which the URL parser has decoded once already).
 */
export function metadataFilter(raw: string | null): Record<string, string> {
  const out: Record<string, string> = {};
  if (!raw) return out;
  for (const [k, v] of new URLSearchParams(raw)) {
    try {
      out[decodeURIComponent(k)] = decodeURIComponent(v);
    } catch {
      throw badRequest(`metadata: "${k}" is not URI-encoded`);
    }
  }
  return out;
}
