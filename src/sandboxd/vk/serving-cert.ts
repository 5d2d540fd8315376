/**
 * The virtual kubelets' serving certificate when none is given: as the kubelet does without --tls-cert-file, a
 * self-signed one (its own CA) for the address the apiserver dials, kept in the data dir and reused while it
 * still covers that address and is valid for another 30 days. kube-apiserver verifies kubelet serving certificates
 * only when run with --kubelet-certificate-authority; clusters that do should pass --kubelet-tls-cert instead.
 */
import { X509Certificate } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { covers, createCertificateAuthority, issueCertificate, keyMatches } from '../../pki/index.js';

const VALIDITY_MS = 365 * 24 * 3600 * 1000;
const RENEW_BEFORE_MS = 30 * 24 * 3600 * 1000;

export function selfSignedKubeletCert(dir: string, address: string, now = new Date()): { cert: string; key: string } {
  const cert = join(dir, 'kubelet-serving.crt');
  const key = join(dir, 'kubelet-serving.key');
  if (existsSync(cert) && existsSync(key)) {
    const pair = { certPem: readFileSync(cert, 'utf8'), keyPem: readFileSync(key, 'utf8') };
    const x = new X509Certificate(pair.certPem);
    if (keyMatches(pair) && covers(x, address) && new Date(x.validTo).getTime() - now.getTime() > RENEW_BEFORE_MS)
      return { cert, key };
  }
  const validity = { validityMs: VALIDITY_MS, now };
  const ca = createCertificateAuthority({ commonName: `${address}-ca@${Math.floor(now.getTime() / 1000)}` }, validity);
  const leaf = issueCertificate(ca, {
    subject: { commonName: `${address}@${Math.floor(now.getTime() / 1000)}` },
    usages: ['server'],
    subjectAltNames: [address],
    ...validity,
  });
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  writeFileSync(key, leaf.keyPem, { mode: 0o600 });
  writeFileSync(cert, `${leaf.certPem}${ca.certPem}`);
  return { cert, key };
}
