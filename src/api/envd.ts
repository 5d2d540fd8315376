/**
 * The contract between the e2b control plane (sandbox-apiserver, src/apiserver/e2b) and the data plane each node
 * serves (sandboxd, src/sandboxd/envd): the port envd answers on, the envd version whose SDK gates are implemented,
 * and how a sandbox's envd access token is derived from its sandboxd token. Both sides compute the token, so it is
 * never stored or sent between them, and it grants envd only (the sandboxd token also drives release, fork, ...).
 */
import { createHash, createHmac, timingSafeEqual } from 'node:crypto';

/** The in-sandbox port of envd (E2b-Sandbox-Port, the `49983-<id>.<domain>` host). */
export const ENVD_PORT = 49983;

/**
 * The envd version reported to SDKs, the one place it is set: every feature the SDKs gate at or below it is
 * implemented (docs/e2b.md "envd versions" lists each gate and what serves it). 0.6.4 is the newest gate of the SDKs
 * tested (JS 2.51, Python 2.63: file metadata 0.6.2, watch entries 0.6.3, watches on network mounts 0.6.4).
 */
export const ENVD_VERSION = '0.6.4';

/** The envd access token of a sandbox whose sandboxd token is `sandboxToken`. */
export function envdAccessToken(sandboxToken: string): string {
  return createHmac('sha256', sandboxToken).update('sandbox-operator envd access token v1').digest('base64url');
}

/**
 * The traffic access token of a sandbox whose envd access token is `envdToken`: what e2b's SDK sends as
 * `E2B-Traffic-Access-Token` to the ports of a sandbox created with `allowPublicTraffic: false`. It grants those ports
 * only (it cannot be turned back into the envd token), so it can be handed to whoever should reach a port.
 */
export function trafficAccessToken(envdToken: string): string {
  return createHmac('sha256', envdToken).update('sandbox-operator traffic access token v1').digest('base64url');
}

/**
 * A v1 file signature, as the SDK signs `uploadUrl` / `downloadUrl`: `v1_` + base64(sha256("<path>:<read|write>:
 * <user>:<envd token>[:<expiration>]")) without padding. envd checks it (src/api/envd-access.ts); the router
 * uses it to find which sandbox a signed URL without a sandbox id is for (src/apiserver/e2b/router.ts).
 */
export function fileSignature(
  path: string,
  operation: 'read' | 'write',
  user: string,
  token: string,
  expiration?: number,
): string {
  const raw = `${path}:${operation}:${user}:${token}${expiration === undefined ? '' : `:${expiration}`}`;
  return `v1_${createHash('sha256').update(raw).digest('base64').replace(/=+$/, '')}`;
}

/**
 * Compare a presented secret (a token, a signature) with the expected one in time independent of both: digests of
 * equal length are compared, so neither a matching prefix nor the lengths show in the timing.
 */
export function sameSecret(a: string, b: string): boolean {
  const dx = createHash('sha256').update(a).digest();
  const dy = createHash('sha256').update(b).digest();
  return timingSafeEqual(dx, dy) && a.length === b.length;
}
