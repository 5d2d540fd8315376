/**
 * Front-proxy (requestheader) authentication, as k8s.io/apiserver's x509 Verifier around its requestheader
 * authenticator: the identity headers the aggregator sets (X-Remote-User, -Uid, -Group, -Extra-<key>) are
 * believed only on a connection whose client certificate chains to the requestheader CA for clientAuth and,
 * when requestheader-allowed-names is set, has one of those common names. Without such a certificate the headers
 * are ignored; either way they are removed from the request, so nothing after this step can read them.
 */
import type { IncomingMessage } from 'node:http';
import { silentLogger, type Logger } from '../../log/logger.js';
import type { AuthenticationResult, Authenticator, UserInfo } from '../types.js';
import type { AuthenticationConfigProvider, RequestHeaderConfig } from './authn-config.js';
import { headerValues, removeHeaders } from './headers.js';
import { lastValue, PerConnection, peerCertificates } from './tls-peer.js';
import { verifyClientChain } from './x509-chain.js';

type Trust = { ok: true; recheckAt: number } | { ok: false; reason: string; recheckAt: number };

export interface FrontProxyAuthenticatorOptions {
  logger?: Logger;
}

/** Go's url.PathUnescape, keeping a malformed key as it came ("always record extra strings"). */
function unescapeExtraKey(key: string): string {
  try {
    return decodeURIComponent(key);
  } catch {
    return key;
  }
}

function isIdentityHeader(rh: RequestHeaderConfig, name: string): boolean {
  return (
    rh.usernameHeaders.includes(name) ||
    rh.uidHeaders.includes(name) ||
    rh.groupHeaders.includes(name) ||
    rh.extraHeaderPrefixes.some((p) => name.startsWith(p))
  );
}

/** The first non-empty first value among `names`, as requestheader.go's headerValue. */
function firstHeaderValue(req: IncomingMessage, names: string[]): string {
  for (const name of names) {
    const v = headerValues(req, name)[0];
    if (v) return v;
  }
  return '';
}

function identityFromHeaders(req: IncomingMessage, rh: RequestHeaderConfig): UserInfo | undefined {
  const name = firstHeaderValue(req, rh.usernameHeaders);
  if (!name) return undefined;
  const uid = firstHeaderValue(req, rh.uidHeaders);
  const groups = rh.groupHeaders.flatMap((h) => headerValues(req, h).filter((v) => v !== ''));
  const extra: Record<string, string[]> = {};
  for (const prefix of rh.extraHeaderPrefixes)
    for (const header of Object.keys(req.headersDistinct)) {
      if (!header.startsWith(prefix)) continue;
      const key = unescapeExtraKey(header.slice(prefix.length));
      (extra[key] ??= []).push(...headerValues(req, header));
    }
  return { name, ...(uid ? { uid } : {}), groups, extra };
}

export class FrontProxyAuthenticator implements Authenticator {
  private readonly trusts = new PerConnection<Trust>();
  private readonly log: Logger;

  constructor(
    private readonly config: AuthenticationConfigProvider,
    opts: FrontProxyAuthenticatorOptions = {},
  ) {
    this.log = (opts.logger ?? silentLogger).child({ authenticator: 'front-proxy' });
  }

  authenticate(req: IncomingMessage): AuthenticationResult {
    const { requestHeader: rh, generation } = this.config.current;
    if (!rh) return undefined;
    try {
      const trust = this.trust(req, rh, generation);
      if (!trust.ok) {
        if (firstHeaderValue(req, rh.usernameHeaders))
          this.log.debug(
            { reason: trust.reason },
            'identity headers from a connection that is not the front proxy; ignored',
          );
        return undefined;
      }
      // a front-proxy certificate without a user header is no identity (upstream returns "not mine" too)
      const user = identityFromHeaders(req, rh);
      return user ? { user } : undefined;
    } finally {
      removeHeaders(req, (name) => isIdentityHeader(rh, name));
    }
  }

  private trust(req: IncomingMessage, rh: RequestHeaderConfig, generation: number): Trust {
    const now = Date.now();
    const memo = this.trusts.get(req.socket, generation, now);
    if (memo) return memo;
    const trust = this.verify(req, rh, now);
    this.trusts.set(req.socket, generation, trust, trust.recheckAt);
    return trust;
  }

  private verify(req: IncomingMessage, rh: RequestHeaderConfig, now: number): Trust {
    const peer = peerCertificates(req.socket);
    if (!peer) return { ok: false, reason: 'no client certificate', recheckAt: Number.POSITIVE_INFINITY };
    const verdict = verifyClientChain(peer.chain, rh.roots, now);
    if (!verdict.ok)
      return { ok: false, reason: `requestheader-client-ca-file: ${verdict.reason}`, recheckAt: verdict.recheckAt };
    const cn = lastValue(peer.subject, 'CN');
    if (rh.allowedNames.length > 0 && !rh.allowedNames.includes(cn))
      return {
        ok: false,
        reason: `the front-proxy certificate's common name ${JSON.stringify(cn)} is not in requestheader-allowed-names`,
        recheckAt: verdict.recheckAt,
      };
    return { ok: true, recheckAt: verdict.recheckAt };
  }
}
