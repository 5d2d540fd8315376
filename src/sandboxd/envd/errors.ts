/**
 * How the data plane reports failures: agent errors (`agent.*` codes, src/guest) become Connect codes
 * for RPCs and HTTP statuses for `/files`, with the SDK's `{code, message}` bodies. The SDK maps these to its own
 * errors (not_found → FileNotFoundError, already_exists → false from makeDir, ...), so the mapping is the API.
 */
import type { ServerResponse } from 'node:http';
import { Code, ConnectError } from '@connectrpc/connect';
import type { ErrorCode } from '../../error-codes.js';
import { SandboxError } from '../../errors.js';

/** Typed by the table of codes (src/error-codes.ts), so a code renamed there cannot silently fall through here. */
const CONNECT_BY_AGENT: Partial<Record<ErrorCode, Code>> = {
  'agent.enoent': Code.NotFound,
  'agent.eexist': Code.AlreadyExists,
  'agent.eacces': Code.PermissionDenied,
  'agent.eisdir': Code.InvalidArgument,
  'agent.enotdir': Code.InvalidArgument,
  'agent.einval': Code.InvalidArgument,
  'agent.invalid-argument': Code.InvalidArgument,
  'agent.enotempty': Code.FailedPrecondition,
  'agent.file-too-large': Code.ResourceExhausted,
  'agent.elimit': Code.ResourceExhausted,
  'agent.esrch': Code.NotFound,
  'agent.timeout': Code.DeadlineExceeded,
  'agent.disconnected': Code.Unavailable,
  // The guest broke the protocol: its connection is gone (a 502, as the error table says), not a fault of this node.
  'agent.protocol': Code.Unavailable,
  'agent.version': Code.Unavailable,
  'agent.unreachable': Code.Unavailable,
  'vm.invalid-state': Code.Unavailable,
  'vm.gone': Code.Unavailable,
  'agent.aborted': Code.Canceled,
  'agent.ecanceled': Code.Canceled,
};

/** Any error as a ConnectError (a ConnectError passes through). */
export function toConnectError(err: unknown): ConnectError {
  if (err instanceof ConnectError) return err;
  if (err instanceof SandboxError) return new ConnectError(err.message, CONNECT_BY_AGENT[err.code] ?? Code.Internal);
  return new ConnectError(err instanceof Error ? err.message : String(err), Code.Internal);
}

const HTTP_BY_CONNECT: Partial<Record<Code, number>> = {
  [Code.NotFound]: 404,
  [Code.AlreadyExists]: 409,
  [Code.PermissionDenied]: 403,
  [Code.InvalidArgument]: 400,
  [Code.FailedPrecondition]: 400,
  [Code.ResourceExhausted]: 507,
  [Code.Unauthenticated]: 401,
  [Code.Unavailable]: 502,
  [Code.DeadlineExceeded]: 504,
};

/** An error of the plain-HTTP endpoints: status and message. */
export class HttpFailure extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** Any error as the HTTP status and message of a `/files` or `/health` answer. */
export function httpFailure(err: unknown): HttpFailure {
  if (err instanceof HttpFailure) return err;
  const c = toConnectError(err);
  return new HttpFailure(HTTP_BY_CONNECT[c.code] ?? 500, c.rawMessage);
}

/** `{code, message}` with the same HTTP status (the SDK's error shape); `extra` fields are added to the body. */
export function sendJsonError(res: ServerResponse, status: number, message: string, extra: object = {}): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const body = JSON.stringify({ code: status, message, ...extra });
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}
