/**
 * What discovery and OpenAPI have in common: documents computed once from the served resources, served as fixed
 * bytes with an ETag that is the uppercase hex SHA-512 of those bytes (kube-openapi's and the aggregated discovery
 * handler's convention), answered 304 on a matching If-None-Match, and chosen by Accept. The server writes the
 * returned `{status, headers, body}` as is; nothing here touches a socket.
 */
import { createHash } from 'node:crypto';
import { SandboxError } from '../errors.js';
import { failureStatus } from '../kube/status-errors.js';
import { requestTarget } from '../net/request-target.js';

/** What the server writes back: `body` is absent for 304. */
export interface StaticResponse {
  status: number;
  headers: Record<string, string>;
  body?: string;
}

/** The parts of a GET that discovery and OpenAPI look at. */
export interface StaticRequest {
  /** Path and query, as on the request line (`/openapi/v3/apis/agents.x-k8s.io/v1beta1?hash=...`). */
  url: string;
  accept?: string | undefined;
  ifNoneMatch?: string | undefined;
}

export interface ServedDocument {
  body: string;
  /** Uppercase hex SHA-512 of `body` (unquoted; the header value is quoted). */
  hash: string;
}

export function servedDocument(value: unknown): ServedDocument {
  const body = JSON.stringify(value);
  return { body, hash: sha512Hex(body) };
}

export function sha512Hex(body: string): string {
  return createHash('sha512').update(body).digest('hex').toUpperCase();
}

/**
 * If-None-Match against our strong ETag: a list of entity tags, possibly weak (W/), or `*` (RFC 9110 §13.1.2 uses
 * the weak comparison for it). Upstream compares the header verbatim; accepting lists too costs nothing.
 */
export function ifNoneMatchHits(ifNoneMatch: string | undefined, hash: string): boolean {
  if (!ifNoneMatch) return false;
  const quoted = `"${hash}"`;
  return ifNoneMatch.split(',').some((tag) => {
    const t = tag.trim();
    return t === '*' || t === quoted || t === `W/${quoted}`;
  });
}

/**
 * 200 with the document, or 304 without a body when the client's cached copy is current. The ETag (and `Vary`,
 * `Cache-Control` when given) are on both, as http.ServeContent and ServeHTTPWithETag send them.
 */
export function serve(
  doc: ServedDocument,
  contentType: string,
  ifNoneMatch: string | undefined,
  extraHeaders: Record<string, string> = {},
): StaticResponse {
  const headers = { ...extraHeaders, Etag: `"${doc.hash}"` };
  if (ifNoneMatchHits(ifNoneMatch, doc.hash)) return { status: 304, headers };
  return { status: 200, headers: { ...headers, 'Content-Type': contentType }, body: doc.body };
}

export interface MediaRange {
  /** `type/subtype`, lowercased. */
  type: string;
  /** Parameters other than q; names lowercased, values as sent. */
  params: Record<string, string>;
  q: number;
}

/** The Accept header's media ranges in the client's order of preference (q first, then position); q=0 dropped. */
export function acceptedRanges(accept: string | undefined): MediaRange[] {
  if (!accept || !accept.trim()) return [{ type: '*/*', params: {}, q: 1 }];
  return accept
    .split(',')
    .map((part, index) => {
      const [type = '', ...rest] = part.split(';').map((s) => s.trim());
      const params: Record<string, string> = {};
      for (const p of rest) {
        const eq = p.indexOf('=');
        if (eq > 0)
          params[p.slice(0, eq).trim().toLowerCase()] = p
            .slice(eq + 1)
            .trim()
            .replace(/^"(.*)"$/, '$1');
      }
      const q = params.q === undefined ? 1 : Number(params.q);
      delete params.q;
      return { range: { type: type.toLowerCase(), params, q: Number.isFinite(q) ? q : 0 }, index };
    })
    .filter(({ range }) => range.type.includes('/') && range.q > 0)
    .sort((a, b) => b.range.q - a.range.q || a.index - b.index)
    .map(({ range }) => range);
}

/** Whether a media range without parameters covers `application/json`. */
export function coversJson(range: MediaRange): boolean {
  return range.type === 'application/json' || range.type === 'application/*' || range.type === '*/*';
}

const JSON_UTF8 = 'application/json';

/** 406 as a Status object, naming what we do serve (apimachinery's NewNotAcceptableError message). */
export function notAcceptable(offered: readonly string[]): StaticResponse {
  const message = `only the following media types are accepted: ${offered.join(', ')}`;
  const refused = jsonStatus(406, 'NotAcceptable', message);
  refused.headers.Vary = 'Accept';
  return refused;
}

export function notFound(path: string): StaticResponse {
  return jsonStatus(404, 'NotFound', `the server could not find the requested resource (${path})`);
}

function jsonStatus(code: number, reason: string, message: string): StaticResponse {
  return {
    status: code,
    headers: { 'Content-Type': JSON_UTF8 },
    body: JSON.stringify(failureStatus(code, reason, message)),
  };
}

/** The path and query of a request-line URL. */
export function splitUrl(url: string): { path: string; query: URLSearchParams } {
  // the one parse of request targets (a `//x` path is not an authority); the server has refused others already
  const parsed = requestTarget({ url }, (message) => new SandboxError('apiserver.bad-request', message));
  return { path: parsed.pathname, query: parsed.searchParams };
}
