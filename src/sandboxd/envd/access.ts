/**
 * Who may use a sandbox's envd: the `X-Access-Token` header must equal the sandbox's envd access token
 * (src/api/envd.ts; compared in constant time), or, for `/files` only, the request carries a valid v1 signature:
 * `v1_` + base64(sha256("<path>:<read|write>:<user>:<token>[:<expiration>]")) without padding, and an expiration
 * (unix seconds) that has not passed. The SDK signs exactly this (uploadUrl / downloadUrl).
 *
 * Who may reach a sandbox's other ports (mayReachPort): anyone when the sandbox was created through the e2b API
 * with public traffic (e2b's default), else only a request carrying its envd access token or its traffic access
 * token (`E2B-Traffic-Access-Token`, what the SDK sends for `allowPublicTraffic: false`). Claim ids are no secret
 * (NodeInventory publishes them), so an id alone must not open a port.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { fileSignature, sameSecret } from '../../api/envd.js';

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

// One formula for envd and for sandbox-apiserver's router (which finds the sandbox a signed URL is for).
export { fileSignature };

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
