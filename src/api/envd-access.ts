/**
 * Who may use a sandbox's envd and its other ports: the one rule both sides apply, envd on the node
 * (src/sandboxd/envd: files-http.ts, server.ts, guest-ports.ts) and sandbox-apiserver's router, which must know whether a request to
 * a paused sandbox is one the node would serve before it resumes the sandbox for it (src/apiserver/e2b/auto-resume.ts).
 *
 * envd: the `X-Access-Token` header must equal the sandbox's envd access token (src/api/envd.ts; compared in
 * constant time), or, for `/files` only, the request carries a valid v1 signature: `v1_` +
 * base64(sha256("<path>:<read|write>:<user>:<token>[:<expiration>]")) without padding, and an expiration (unix
 * seconds) that has not passed. The SDK signs exactly this (uploadUrl / downloadUrl).
 *
 * Other ports (mayReachPort): anyone when the sandbox was created through the e2b API with public traffic (e2b's
 * default), else only a request carrying its envd access token or its traffic access token
 * (`E2B-Traffic-Access-Token`, what the SDK sends for `allowPublicTraffic: false`). Claim ids are no secret
 * (NodeInventory publishes them), so an id alone must not open a port.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { requestTarget } from '../net/request-target.js';
import { ENVD_PORT, fileSignature, sameSecret } from './envd.js';

export function hasAccessToken(headers: IncomingHttpHeaders, token: string): boolean {
  const given = headers['x-access-token'];
  return typeof given === 'string' && given.length > 0 && sameSecret(given, token);
}

/** Whether this request may reach an in-sandbox port other than envd's (see the top of this file). */
export function mayReachPort(
  headers: IncomingHttpHeaders,
  sbx: { publicTraffic: boolean; envdToken: string; trafficToken: string },
): boolean {
  if (sbx.publicTraffic || hasAccessToken(headers, sbx.envdToken)) return true;
  const given = headers['e2b-traffic-access-token'];
  return typeof given === 'string' && given.length > 0 && sameSecret(given, sbx.trafficToken);
}

/** Why a signed `/files` URL is refused, or undefined when it is valid. */
export function signatureProblem(
  query: URLSearchParams,
  operation: 'read' | 'write',
  token: string,
  now = Date.now(),
): string | undefined {
  const signature = query.get('signature') ?? '';
  const rawExp = query.get('signature_expiration');
  let expiration: number | undefined;
  if (rawExp !== null && rawExp !== '') {
    if (!/^\d+$/.test(rawExp)) return 'signature_expiration is not a unix time in seconds';
    expiration = Number(rawExp);
    if (expiration * 1000 < now) return 'signature is already expired';
  }
  const want = fileSignature(query.get('path') ?? '', operation, query.get('username') ?? '', token, expiration);
  return sameSecret(signature, want) ? undefined : 'invalid signature';
}

/**
 * Whether a request to `port` of the sandbox carries what the node asks of it: the sandbox's envd token (envd),
 * a valid signature (envd's `/files`, GET read, POST write), or what mayReachPort accepts (other ports). An
 * unauthenticated request (envd's tokenless `/health` included) is not one: it must not wake a paused sandbox.
 */
export function isAuthorizedRequest(
  req: { method?: string | undefined; url?: string | undefined; headers: IncomingHttpHeaders },
  port: number,
  sbx: { publicTraffic: boolean; envdToken: string; trafficToken: string },
): boolean {
  if (port !== ENVD_PORT) return mayReachPort(req.headers, sbx);
  if (hasAccessToken(req.headers, sbx.envdToken)) return true;
  let url: URL;
  try {
    // as envd reads it (a `//x` target is a path, not an authority)
    url = requestTarget(req, (message) => new Error(message));
  } catch {
    return false;
  }
  const op = req.method === 'GET' ? 'read' : req.method === 'POST' ? 'write' : undefined;
  return (
    url.pathname === '/files' &&
    op !== undefined &&
    url.searchParams.has('signature') &&
    signatureProblem(url.searchParams, op, sbx.envdToken) === undefined
  );
}
