/**
 * Client certificate chain verification, as Go's crypto/x509 Verify with KeyUsages [ClientAuth] does it for
 * k8s.io/apiserver's x509 authenticators: a path from the leaf through the certificates the peer sent to one of
 * the given roots, every signature checked, every certificate inside its validity window, every certificate's
 * extended key usage permitting clientAuth (no EKU extension permits any, as in Go), intermediates marked CA.
 * Node's TLS layer is told not to reject (a server trusts two CAs for two purposes), so this is the check.
 */
import type { X509Certificate } from 'node:crypto';

const EKU_CLIENT_AUTH = '1.3.6.1.5.5.7.3.2';
const EKU_ANY = '2.5.29.37.0';
/** Longer paths are not worth searching (Go has no fixed bound; real client chains are 1-3 long). */
const MAX_CHAIN_LENGTH = 6;
/** How long a failed verdict stands before a connection's certificate is looked at again. */
const FAILED_RECHECK_MS = 60_000;

export type ChainVerdict =
  | { ok: true; chain: X509Certificate[]; /** ms epoch: the first notAfter in the chain. */ recheckAt: number }
  | { ok: false; reason: string; recheckAt: number };

/** `CN=..., issuer CN=...`, for error messages. */
export function describeCertificate(cert: X509Certificate): string {
  const oneLine = (dn: string) => dn.replace(/\n/g, ', ');
  return `"${oneLine(cert.subject)}" (issued by "${oneLine(cert.issuer)}")`;
}

function timeProblem(cert: X509Certificate, now: number): string | undefined {
  const from = Date.parse(cert.validFrom);
  const to = Date.parse(cert.validTo);
  if (Number.isNaN(from) || Number.isNaN(to))
    return `certificate ${describeCertificate(cert)} has an unreadable validity`;
  if (now < from) return `certificate ${describeCertificate(cert)} is not valid before ${cert.validFrom}`;
  if (now > to) return `certificate ${describeCertificate(cert)} expired at ${cert.validTo}`;
  return undefined;
}

function permitsClientAuth(cert: X509Certificate): boolean {
  const eku = cert.keyUsage; // node names the extended key usage OIDs keyUsage; undefined when absent
  return eku === undefined || eku.includes(EKU_CLIENT_AUTH) || eku.includes(EKU_ANY);
}

/** OpenSSL's X509_check_issued (names, key identifiers, the issuer's keyCertSign) and the signature itself. */
function issuedBy(cert: X509Certificate, issuer: X509Certificate): boolean {
  return cert.checkIssued(issuer) && cert.verify(issuer.publicKey);
}

/**
 * Verify `presented` (leaf first, then what the peer sent as its chain, in any order) against `roots` at `now`.
 * The reason of a failure names the certificate and what is wrong with it.
 */
export function verifyClientChain(
  presented: readonly X509Certificate[],
  roots: readonly X509Certificate[],
  now = Date.now(),
): ChainVerdict {
  const leaf = presented[0];
  const recheckFailed = now + FAILED_RECHECK_MS;
  if (!leaf) return { ok: false, reason: 'no client certificate', recheckAt: recheckFailed };
  let firstProblem: string | undefined;

  const check = (cert: X509Certificate): string | undefined =>
    timeProblem(cert, now) ??
    (permitsClientAuth(cert)
      ? undefined
      : `certificate ${describeCertificate(cert)} is not for client authentication (extended key usage ${cert.keyUsage?.join(', ')})`);

  // depth-first over the presented intermediates: the first path that ends at a root and passes every check wins
  const search = (path: X509Certificate[], unused: X509Certificate[]): X509Certificate[] | undefined => {
    const current = path[path.length - 1]!;
    const problem = check(current);
    if (problem) {
      firstProblem ??= problem;
      return undefined;
    }
    for (const root of roots) {
      if (!issuedBy(current, root)) continue;
      const rootProblem = root.raw.equals(current.raw) ? undefined : check(root);
      if (!rootProblem) return root.raw.equals(current.raw) ? path : [...path, root];
      firstProblem ??= rootProblem;
    }
    if (path.length >= MAX_CHAIN_LENGTH) return undefined;
    for (const [i, next] of unused.entries()) {
      if (!next.ca || !issuedBy(current, next)) continue;
      const found = search(
        [...path, next],
        unused.filter((_, j) => j !== i),
      );
      if (found) return found;
    }
    return undefined;
  };

  const chain = search([leaf], presented.slice(1));
  if (!chain)
    return {
      ok: false,
      reason: firstProblem ?? `certificate ${describeCertificate(leaf)} is not signed by a trusted CA`,
      recheckAt: recheckFailed,
    };
  return { ok: true, chain, recheckAt: Math.min(...chain.map((c) => Date.parse(c.validTo))) };
}
