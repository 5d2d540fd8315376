export {
  createCertificateAuthority,
  issueCertificate,
  newKey,
  privateKeyPem,
  publicKeyPem,
  keyMatches,
  covers,
  type Subject,
  type Usage,
  type Validity,
  type CertificateRequest,
  type PemPair,
} from './x509.js';
