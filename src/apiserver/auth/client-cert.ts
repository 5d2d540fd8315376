/**
 * Client certificate authentication against `client-ca-file` (k8s.io/apiserver pkg/authentication/request/x509,
 * CommonNameUserConversion): the user is the certificate's common name, the groups its organizations, and the
 * extra `authentication.kubernetes.io/credential-id` names the certificate by its SHA-256. A certificate that
 * does not verify is a failure (401), never a fall-through to weaker credentials.
 */
import { createHash } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { AuthenticationResult, Authenticator } from '../types.js';
import type { AuthenticationConfigProvider } from './authn-config.js';
import { allValues, lastValue, PerConnection, peerCertificates } from './tls-peer.js';
import { verifyClientChain } from './x509-chain.js';

export const CREDENTIAL_ID_EXTRA = 'authentication.kubernetes.io/credential-id';

interface Memo {
  result: AuthenticationResult;
  recheckAt: number;
}

export class ClientCertAuthenticator implements Authenticator {
  private readonly results = new PerConnection<Memo>();

  constructor(private readonly config: AuthenticationConfigProvider) {}

  authenticate(req: IncomingMessage): AuthenticationResult {
    const { clientCa, generation } = this.config.current;
    if (!clientCa) return undefined;
    const now = Date.now();
    const memo = this.results.get(req.socket, generation, now);
    if (memo) return memo.result;
    const peer = peerCertificates(req.socket);
    if (!peer) return undefined;
    const verdict = verifyClientChain(peer.chain, clientCa.roots, now);
    let result: AuthenticationResult;
    if (!verdict.ok) result = { failure: `client certificate: ${verdict.reason}` };
    else {
      const name = lastValue(peer.subject, 'CN');
      const fingerprint = createHash('sha256').update(peer.chain[0]!.raw).digest('hex');
      result = name
        ? {
            user: {
              name,
              groups: allValues(peer.subject, 'O'),
              extra: { [CREDENTIAL_ID_EXTRA]: [`X509SHA256=${fingerprint}`] },
            },
          }
        : undefined; // no common name: not an identity, as upstream
    }
    this.results.set(req.socket, generation, { result, recheckAt: verdict.recheckAt }, verdict.recheckAt);
    return result;
  }
}
