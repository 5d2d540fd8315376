import type { ErrorCode } from '../error-codes.js';
import { SandboxError } from '../errors.js';

/** A Kubernetes `Status` (metav1.Status) as the apiserver returns it on failures. */
export interface KubeStatus {
  kind?: 'Status';
  apiVersion?: 'v1';
  status?: 'Failure' | 'Success';
  message?: string;
  reason?: string;
  code?: number;
  details?: {
    name?: string;
    group?: string;
    kind?: string;
    uid?: string;
    causes?: Array<{ reason?: string; message?: string; field?: string }>;
    retryAfterSeconds?: number;
  };
}

/** A failure `Status` as every server of ours answers with one (sandbox-apiserver, the kubelet API). */
export function failureStatus(
  code: number,
  reason: string,
  message: string,
  details?: KubeStatus['details'],
): KubeStatus & { metadata: Record<string, never> } {
  return {
    kind: 'Status',
    apiVersion: 'v1',
    metadata: {},
    status: 'Failure',
    message,
    reason,
    code,
    ...(details ? { details } : {}),
  };
}

/** The code of a failed call by the Status reason it was answered with (apimachinery's StatusReasons). */
export const KUBE_CODE_BY_REASON: Readonly<Record<string, ErrorCode>> = {
  AlreadyExists: 'kube.already-exists',
  BadRequest: 'kube.bad-request',
  Conflict: 'kube.conflict',
  Expired: 'kube.expired',
  Forbidden: 'kube.forbidden',
  Gone: 'kube.gone',
  InternalError: 'kube.internal-error',
  Invalid: 'kube.invalid',
  MethodNotAllowed: 'kube.method-not-allowed',
  NotAcceptable: 'kube.not-acceptable',
  NotFound: 'kube.not-found',
  RequestEntityTooLarge: 'kube.request-entity-too-large',
  ServerTimeout: 'kube.server-timeout',
  ServiceUnavailable: 'kube.service-unavailable',
  Timeout: 'kube.timeout',
  TooManyRequests: 'kube.too-many-requests',
  Unauthorized: 'kube.unauthorized',
  Unknown: 'kube.unknown',
  UnsupportedMediaType: 'kube.unsupported-media-type',
};

/** Every failed API call becomes one of these, built in exactly one place (fromResponse). */
export class StatusError extends SandboxError {
  readonly status: KubeStatus;
  readonly httpCode: number;

  constructor(httpCode: number, status: KubeStatus, verb: string, path: string) {
    const reason = status.reason ?? 'Unknown';
    super(
      Object.hasOwn(KUBE_CODE_BY_REASON, reason) ? KUBE_CODE_BY_REASON[reason]! : 'kube.unknown',
      `${verb} ${path}: ${status.message ?? `HTTP ${httpCode}`}`,
    );
    this.name = 'StatusError';
    this.status = status;
    this.httpCode = httpCode;
  }

  get reason(): string {
    return this.status.reason ?? '';
  }

  static fromResponse(httpCode: number, body: string, verb: string, path: string): StatusError {
    let status: KubeStatus;
    try {
      const parsed = JSON.parse(body) as KubeStatus;
      status = parsed && parsed.kind === 'Status' ? parsed : { message: body.slice(0, 500), code: httpCode };
    } catch {
      status = { message: body.slice(0, 500) || `HTTP ${httpCode}`, code: httpCode };
    }
    status.reason ??= reasonForCode(httpCode);
    return new StatusError(httpCode, status, verb, path);
  }
}

function reasonForCode(code: number): string {
  switch (code) {
    case 400:
      return 'BadRequest';
    case 401:
      return 'Unauthorized';
    case 403:
      return 'Forbidden';
    case 404:
      return 'NotFound';
    case 405:
      return 'MethodNotAllowed';
    case 409:
      return 'Conflict';
    case 410:
      return 'Expired';
    case 422:
      return 'Invalid';
    case 429:
      return 'TooManyRequests';
    case 500:
      return 'InternalError';
    case 503:
      return 'ServiceUnavailable';
    case 504:
      return 'Timeout';
    default:
      return 'Unknown';
  }
}

const hasCode = (err: unknown, code: number) => err instanceof StatusError && err.httpCode === code;
export const isNotFound = (err: unknown): boolean => hasCode(err, 404);
export const isAlreadyExists = (err: unknown): boolean => err instanceof StatusError && err.reason === 'AlreadyExists';
/** A resourceVersion precondition failed (optimistic concurrency). AlreadyExists is also a 409 but not this. */
export const isConflict = (err: unknown): boolean => hasCode(err, 409) && !isAlreadyExists(err);
export const isInvalid = (err: unknown): boolean => hasCode(err, 422);
export const isGone = (err: unknown): boolean => hasCode(err, 410);
export const isForbidden = (err: unknown): boolean => hasCode(err, 403);
