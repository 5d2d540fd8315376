/**
 * The HTTP status and Kubernetes reason each of our servers answers an error with, generated from the one table of
 * codes (src/error-codes.ts): every code is mapped on every surface, so no known condition falls through to a
 * silent 500. What differs per surface is only the body (sandboxd and the webhook `{"error"}`, the kubelet API and
 * sandbox-apiserver a Kubernetes Status, whose `reason` is the one given here). test/errors/error-codes.test.ts
 * checks that every code thrown in src/ is in the table, hence in each mapping.
 */
import { randomBytes } from 'node:crypto';
import { ERROR_CODES, type ErrorCode } from './error-codes.js';
import { SandboxError } from './errors.js';

export const HTTP_SURFACES = ['sandboxd', 'kubelet', 'webhook', 'apiserver'] as const;
export type HttpSurface = (typeof HTTP_SURFACES)[number];

export interface HttpMapping {
  readonly status: number;
  /** The Kubernetes StatusReason for the status (used where the body is a Status). */
  readonly reason: string;
}

const REASON_BY_STATUS: Readonly<Record<number, string>> = {
  400: 'BadRequest',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'NotFound',
  405: 'MethodNotAllowed',
  406: 'NotAcceptable',
  409: 'Conflict',
  410: 'Gone',
  413: 'RequestEntityTooLarge',
  415: 'UnsupportedMediaType',
  422: 'Invalid',
  429: 'TooManyRequests',
  500: 'InternalError',
  503: 'ServiceUnavailable',
  504: 'Timeout',
};

/** The StatusReason kube-apiserver gives a status (apimachinery's NewGenericServerResponse): other 5xx InternalError. */
export function reasonForStatus(status: number): string {
  return REASON_BY_STATUS[status] ?? (status >= 500 ? 'InternalError' : 'Unknown');
}

function generate(): ReadonlyMap<ErrorCode, HttpMapping> {
  const out = new Map<ErrorCode, HttpMapping>();
  for (const [code, { status }] of Object.entries(ERROR_CODES))
    out.set(code as ErrorCode, Object.freeze({ status, reason: reasonForStatus(status) }));
  return out;
}

/** One mapping per surface; a surface that ever has to answer a code differently says so here, nowhere else. */
export const HTTP_MAPPINGS: Readonly<Record<HttpSurface, ReadonlyMap<ErrorCode, HttpMapping>>> = Object.freeze(
  Object.fromEntries(HTTP_SURFACES.map((s) => [s, generate()])) as Record<
    HttpSurface,
    ReadonlyMap<ErrorCode, HttpMapping>
  >,
);

const INTERNAL: HttpMapping = Object.freeze({ status: 500, reason: 'InternalError' });

/** The status and reason `surface` answers a thrown value with: a SandboxError's by its code, anything else 500. */
export function httpErrorOf(surface: HttpSurface, err: unknown): HttpMapping {
  return (err instanceof SandboxError && HTTP_MAPPINGS[surface].get(err.code)) || INTERNAL;
}

/** What a server may pass on to its client of an error answer it got from another process (a sandboxd node). */
export interface RelayedError {
  /** The text the client may see. */
  message: string;
  /** Set when the upstream's text was withheld: the id the full text is logged under, and the client is told. */
  incident?: string;
}

/**
 * The relay rule for upstream error texts, the same on every surface that forwards one (sandbox-apiserver's
 * Kubernetes API, the e2b API). A 4xx text is about the caller's own request (a bad name, a quota, a conflict) and
 * passes through. A 5xx text is the upstream's internals (host paths, errno strings, the node's state) and never
 * does: the client gets `what` failed with an incident id, and the caller logs the full text under that id.
 */
export function relayUpstreamError(status: number, text: string, what: string): RelayedError {
  if (status < 500) return { message: text };
  const incident = randomBytes(6).toString('hex');
  return {
    message: `${what} failed (HTTP ${status}, incident ${incident}; the details are in the server's log)`,
    incident,
  };
}
