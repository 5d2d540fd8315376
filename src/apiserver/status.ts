/**
 * Failures as Kubernetes `Status` objects (apimachinery pkg/api/errors): every error the server answers with is a
 * StatusFailure built here, so code, reason and details are consistent and clients (client-go's errors.IsNotFound,
 * kubectl's messages, client-node) read them the way they read kube-apiserver's.
 */
import type { ErrorCode } from '../error-codes.js';
import { httpErrorOf } from '../error-http.js';
import { SandboxError } from '../errors.js';
import { failureStatus, type KubeStatus } from '../kube/index.js';

export type StatusReason =
  | 'BadRequest'
  | 'Unauthorized'
  | 'Forbidden'
  | 'NotFound'
  | 'MethodNotAllowed'
  | 'NotAcceptable'
  | 'AlreadyExists'
  | 'Conflict'
  | 'Gone'
  | 'Expired'
  | 'RequestEntityTooLarge'
  | 'UnsupportedMediaType'
  | 'Invalid'
  | 'TooManyRequests'
  | 'InternalError'
  | 'ServiceUnavailable'
  | 'Timeout';

/** The code of a StatusFailure by its reason. */
export const CODE_BY_REASON: Readonly<Record<StatusReason, ErrorCode>> = {
  BadRequest: 'apiserver.bad-request',
  Unauthorized: 'apiserver.unauthorized',
  Forbidden: 'apiserver.forbidden',
  NotFound: 'apiserver.not-found',
  MethodNotAllowed: 'apiserver.method-not-allowed',
  NotAcceptable: 'apiserver.not-acceptable',
  AlreadyExists: 'apiserver.already-exists',
  Conflict: 'apiserver.conflict',
  Gone: 'apiserver.gone',
  Expired: 'apiserver.expired',
  RequestEntityTooLarge: 'apiserver.request-entity-too-large',
  UnsupportedMediaType: 'apiserver.unsupported-media-type',
  Invalid: 'apiserver.invalid',
  TooManyRequests: 'apiserver.too-many-requests',
  InternalError: 'apiserver.internal-error',
  ServiceUnavailable: 'apiserver.service-unavailable',
  Timeout: 'apiserver.timeout',
};

export interface StatusCause {
  reason: string;
  message: string;
  field?: string;
}

export interface QualifiedResource {
  group: string;
  /** The plural resource name, as Status.details.kind carries it. */
  resource: string;
}

export class StatusFailure extends SandboxError {
  readonly status: Required<Pick<KubeStatus, 'kind' | 'apiVersion' | 'status' | 'message' | 'reason' | 'code'>> &
    KubeStatus;
  /** Extra response headers (Retry-After). */
  readonly headers: Record<string, string>;

  constructor(
    code: number,
    reason: StatusReason,
    message: string,
    details?: KubeStatus['details'],
    headers: Record<string, string> = {},
  ) {
    super(CODE_BY_REASON[reason], message);
    this.name = 'StatusFailure';
    this.status = failureStatus(code, reason, message, details) as StatusFailure['status'];
    this.headers = headers;
  }

  get httpCode(): number {
    return this.status.code;
  }
}

const qualified = (r: QualifiedResource) => (r.group ? `${r.resource}.${r.group}` : r.resource);

export const badRequest = (message: string, causes?: StatusCause[]) =>
  new StatusFailure(400, 'BadRequest', message, causes ? { causes } : undefined);

export const unauthorized = (message = 'Unauthorized') => new StatusFailure(401, 'Unauthorized', message);

export function forbidden(user: string, verb: string, r: QualifiedResource | undefined, path: string, why: string) {
  const what = r ? `resource "${r.resource}" in API group "${r.group}"` : `path "${path}"`;
  return new StatusFailure(
    403,
    'Forbidden',
    `${r ? qualified(r) : path} is forbidden: User "${user}" cannot ${verb} ${what}${why ? `: ${why}` : ''}`,
    r ? { group: r.group, kind: r.resource } : undefined,
  );
}

/** 403 for a reason other than RBAC (admission: e.g. a terminating namespace). */
export const forbiddenBecause = (r: QualifiedResource, name: string, why: string) =>
  new StatusFailure(403, 'Forbidden', `${qualified(r)} "${name}" is forbidden: ${why}`, {
    name,
    group: r.group,
    kind: r.resource,
  });

export const notFound = (r: QualifiedResource, name: string) =>
  new StatusFailure(404, 'NotFound', `${qualified(r)} "${name}" not found`, {
    name,
    group: r.group,
    kind: r.resource,
  });

export const pathNotFound = (path: string) =>
  new StatusFailure(404, 'NotFound', `the server could not find the requested resource (${path})`);

export const methodNotAllowed = (method: string, what: string) =>
  new StatusFailure(405, 'MethodNotAllowed', `${method} is not supported on ${what}`);

export const notAcceptable = (accept: string, offered: string[]) =>
  new StatusFailure(
    406,
    'NotAcceptable',
    `only the following media types are accepted: ${offered.join(', ')} (Accept: ${accept})`,
  );

export const alreadyExists = (r: QualifiedResource, name: string) =>
  new StatusFailure(409, 'AlreadyExists', `${qualified(r)} "${name}" already exists`, {
    name,
    group: r.group,
    kind: r.resource,
  });

export const conflict = (r: QualifiedResource, name: string, why: string) =>
  new StatusFailure(409, 'Conflict', `Operation cannot be fulfilled on ${qualified(r)} "${name}": ${why}`, {
    name,
    group: r.group,
    kind: r.resource,
  });

export const expired = (message: string) => new StatusFailure(410, 'Expired', message);

export const tooLarge = (limit: number) =>
  new StatusFailure(413, 'RequestEntityTooLarge', `the request body is larger than ${limit} bytes`);

export const unsupportedMediaType = (type: string) =>
  new StatusFailure(
    415,
    'UnsupportedMediaType',
    `the body of the request was in an unknown format: ${type}; send application/json`,
  );

/** 422 with field causes (apimachinery errors.NewInvalid). */
export function invalid(kind: string, group: string, name: string, causes: StatusCause[]) {
  const detail = causes.map((c) => (c.field ? `${c.field}: ${c.message}` : c.message)).join(', ');
  return new StatusFailure(422, 'Invalid', `${kind}${group ? `.${group}` : ''} "${name}" is invalid: ${detail}`, {
    name,
    group,
    kind,
    causes,
  });
}

/** 504 Timeout: the request did not complete in the allotted time (kube-apiserver's timeout filter). */
export const requestTimeout = (message: string) => new StatusFailure(504, 'Timeout', message);

export const internalError = (message: string) =>
  new StatusFailure(500, 'InternalError', `Internal error occurred: ${message}`);

export const serviceUnavailable = (message: string, retryAfterSeconds: number) =>
  new StatusFailure(
    503,
    'ServiceUnavailable',
    message,
    { retryAfterSeconds },
    { 'retry-after': String(retryAfterSeconds) },
  );

export const tooManyRequests = (message: string, retryAfterSeconds: number) =>
  new StatusFailure(
    429,
    'TooManyRequests',
    message,
    { retryAfterSeconds },
    { 'retry-after': String(retryAfterSeconds) },
  );

/**
 * Any thrown value as the Status the client gets: StatusFailures as they are, another SandboxError with the status
 * of its code (src/error-codes.ts), anything else a 500.
 */
export function toStatusFailure(err: unknown): StatusFailure {
  if (err instanceof StatusFailure) return err;
  const { status, reason } = httpErrorOf('apiserver', err);
  const message = err instanceof SandboxError ? err.describe() : err instanceof Error ? err.message : String(err);
  return status === 500 ? internalError(message) : new StatusFailure(status, reason as StatusReason, message);
}
