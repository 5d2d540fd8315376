/**
 * X.509 v3 issuance for everything this project certifies: the local cluster's CAs and component certificates
 * (src/cluster/pki.ts), virtual-kubelet serving certificates, and the conversion webhook's CA and serving
 * certificate (src/operator/webhook/certs.ts). Keys are ECDSA P-256, signatures ECDSA with SHA-256.
 *
 * node:crypto makes the keys, signs, and parses/verifies certificates (`X509Certificate`) but does not build
 * them, so this file DER-encodes the TBSCertificate itself (RFC 5280) rather than take a certificate library
 * (docs/dependencies.md says why). What it writes is checked field by field in test/pki/x509.test.ts, by a TLS
 * handshake in test/api/webhook.test.ts, and by Go's crypto/x509 in the real kube-apiserver, controller-manager
 * and kubectl on every cluster start (client certificates, groups from O, the kubelet and webhook CAs).
 */
import {
  createHash,
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  randomBytes,
  sign,
  X509Certificate,
  type KeyObject,
} from 'node:crypto';
import { isIP } from 'node:net';
import { SandboxError } from '../errors.js';
import {
  bitString,
  bool,
  children,
  explicit,
  integer,
  octets,
  oid,
  only,
  seq,
  set,
  time,
  tlv,
  toPem,
  utf8,
} from './der.js';

const OID = {
  ecdsaWithSha256: '1.2.840.10045.4.3.2',
  commonName: '2.5.4.3',
  organization: '2.5.4.10',
  basicConstraints: '2.5.29.19',
  keyUsage: '2.5.29.15',
  extKeyUsage: '2.5.29.37',
  subjectAltName: '2.5.29.17',
  subjectKeyIdentifier: '2.5.29.14',
  authorityKeyIdentifier: '2.5.29.35',
  serverAuth: '1.3.6.1.5.5.7.3.1',
  clientAuth: '1.3.6.1.5.5.7.3.2',
} as const;

/** Certificates start this far in the past, so a peer whose clock lags a little still accepts a fresh one. */
const BACKDATE_MS = 5 * 60 * 1000;

export interface Subject {
  commonName: string;
  /** Subject O values; Kubernetes reads them as the client's groups (e.g. `system:masters`). */
  organizations?: readonly string[];
}

/** What a leaf certificate may be used for (its extended key usages). */
export type Usage = 'server' | 'client';

export interface Validity {
  /** How long from `now` the certificate is valid. */
  validityMs: number;
  now?: Date;
}

export interface CertificateRequest extends Validity {
  /**
   * Sign with a certificate that is not a CA. Only for tests of chain verification, which must build the chains
   * a verifier has to refuse.
   */
  issuerMayBeLeaf?: boolean;
  subject: Subject;
  usages: readonly Usage[];
  /** DNS names and IP addresses (v4 or v6), in the order given. */
  subjectAltNames?: readonly string[];
}

/** A certificate and its private key, both PEM (the key PKCS#8). */
export interface PemPair {
  certPem: string;
  keyPem: string;
}

/**
 * A CA (keyCertSign, cRLSign, digitalSignature) with a fresh key: self-signed, or an intermediate signed by
 * `parent` (never valid past it).
 */
export function createCertificateAuthority(subject: Subject, validity: Validity, parent?: PemPair): PemPair {
  const key = newKey();
  const name = encodeName(subject);
  const authority = parent ? loadAuthority(parent) : undefined;
  const { notBefore, notAfter } = window(validity);
  const certPem = signCertificate({
    subject: name,
    issuer: authority?.subject ?? name,
    publicKey: key.publicKey,
    issuerPublicKey: authority?.publicKey ?? key.publicKey,
    signingKey: authority?.privateKey ?? key.privateKey,
    extensions: [
      extension(OID.basicConstraints, true, seq(bool(true))),
      extension(OID.keyUsage, true, keyUsage([0, 5, 6])),
    ],
    notBefore,
    notAfter: authority && notAfter > authority.notAfter ? authority.notAfter : notAfter,
  });
  return { certPem, keyPem: privateKeyPem(key.privateKey) };
}

/** A leaf certificate with a fresh key, signed by `ca` (never valid past the CA itself). */
export function issueCertificate(ca: PemPair, req: CertificateRequest): PemPair {
  if (req.usages.length === 0) throw invalid(`certificate for ${req.subject.commonName} names no usage`);
  const authority = loadAuthority(ca, req.issuerMayBeLeaf);
  const key = newKey();
  const sans = req.subjectAltNames ?? [];
  const { notBefore, notAfter } = window(req);
  const certPem = signCertificate({
    subject: encodeName(req.subject),
    issuer: authority.subject,
    publicKey: key.publicKey,
    issuerPublicKey: authority.publicKey,
    signingKey: authority.privateKey,
    extensions: [
      extension(OID.basicConstraints, true, seq()),
      // ECDSA keys only sign, so digitalSignature is the one key usage that applies (no keyEncipherment).
      extension(OID.keyUsage, true, keyUsage([0])),
      extension(OID.extKeyUsage, false, seq(...[...new Set(req.usages)].map((u) => oid(EKU[u])))),
      ...(sans.length > 0 ? [extension(OID.subjectAltName, false, subjectAltNames(sans))] : []),
    ],
    notBefore,
    notAfter: notAfter > authority.notAfter ? authority.notAfter : notAfter,
  });
  return { certPem, keyPem: privateKeyPem(key.privateKey) };
}

/** A fresh ECDSA P-256 key pair (the service-account signing key, and the key of every certificate here). */
export function newKey(): { privateKey: KeyObject; publicKey: KeyObject } {
  return generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
}

export function privateKeyPem(key: KeyObject): string {
  return key.export({ type: 'pkcs8', format: 'pem' }).toString();
}

/** SPKI PEM of a public key, or of a private key's public half. */
export function publicKeyPem(key: KeyObject): string {
  return (key.type === 'private' ? createPublicKey(key) : key).export({ type: 'spki', format: 'pem' }).toString();
}

/** Whether `keyPem` is the private key of `certPem`'s public key. */
export function keyMatches(pair: PemPair): boolean {
  return createPublicKey(createPrivateKey(pair.keyPem)).equals(new X509Certificate(pair.certPem).publicKey);
}

/** Whether `cert` covers `name` (an IP SAN for an address, a DNS SAN otherwise). */
export function covers(cert: X509Certificate, name: string): boolean {
  return (isIP(name) ? cert.checkIP(name) : cert.checkHost(name)) !== undefined;
}

// ----------------------------------------------------------------------------------------------- encoding

const EKU: Record<Usage, string> = { server: OID.serverAuth, client: OID.clientAuth };

const invalid = (message: string, cause?: unknown): SandboxError =>
  new SandboxError('pki.invalid-request', message, {
    ...(cause === undefined ? {} : { cause }),
    hint: 'fix the certificate request (names, usages, CA pair) and retry',
  });

function window(v: Validity): { notBefore: Date; notAfter: Date } {
  if (!(v.validityMs > 0)) throw invalid(`validity must be positive, got ${v.validityMs} ms`);
  const now = (v.now ?? new Date()).getTime();
  return { notBefore: new Date(now - BACKDATE_MS), notAfter: new Date(now + v.validityMs) };
}

/** One RDN per attribute (O values, then CN), as `openssl -subj /O=…/CN=…` writes it. */
function encodeName(s: Subject): Buffer {
  if (!s.commonName) throw invalid('a certificate subject needs a common name');
  const rdn = (type: string, value: string) => set(seq(oid(type), utf8(value)));
  return seq(...(s.organizations ?? []).map((o) => rdn(OID.organization, o)), rdn(OID.commonName, s.commonName));
}

const extension = (id: string, critical: boolean, value: Buffer): Buffer =>
  seq(oid(id), ...(critical ? [bool(true)] : []), octets(value));

/** Key usage bits, DER-minimal (trailing zero bits are unused bits). */
function keyUsage(bits: number[]): Buffer {
  let byte = 0;
  for (const b of bits) byte |= 0x80 >> b;
  let unused = 0;
  while (unused < 7 && ((byte >> unused) & 1) === 0) unused++;
  return bitString(Buffer.from([byte]), unused);
}

function subjectAltNames(names: readonly string[]): Buffer {
  return seq(
    ...names.map((n) => {
      const family = isIP(n);
      if (family === 4) return tlv(0x87, Buffer.from(n.split('.').map(Number)));
      if (family === 6) return tlv(0x87, ipv6Bytes(n));
      // dNSName is an IA5String; an empty or non-ASCII name would make a certificate no verifier matches.
      if (!/^[\x21-\x7e]+$/.test(n)) throw invalid(`subject alternative name ${JSON.stringify(n)} is not a DNS name`);
      return tlv(0x82, Buffer.from(n, 'ascii'));
    }),
  );
}

/** The 16 bytes of an IPv6 address that isIP() accepted (`::` shorthand and an IPv4 tail included). */
function ipv6Bytes(ip: string): Buffer {
  let text = ip.split('%')[0]!;
  const v4 = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (v4) {
    const [a, b, c, d] = v4[1]!.split('.').map(Number);
    text = `${text.slice(0, v4.index)}${((a! << 8) | b!).toString(16)}:${((c! << 8) | d!).toString(16)}`;
  }
  const [head = '', tail = ''] = text.split('::');
  const h = head ? head.split(':') : [];
  const t = text.includes('::') ? (tail ? tail.split(':') : []) : [];
  const groups = [...h, ...Array<string>(8 - h.length - t.length).fill('0'), ...t];
  return Buffer.concat(groups.map((g) => Buffer.from([(parseInt(g, 16) >> 8) & 0xff, parseInt(g, 16) & 0xff])));
}

/** RFC 5280 §4.2.1.2 method 1: SHA-1 of the subjectPublicKey bits (what openssl and Go write as the SKI). */
function keyId(publicKey: KeyObject): Buffer {
  const spki = publicKey.export({ type: 'spki', format: 'der' });
  const bits = children(only(spki, 0x30).content)[1];
  if (!bits || bits.tag !== 0x03) throw invalid('public key: no subjectPublicKey bit string');
  return createHash('sha1').update(bits.content.subarray(1)).digest();
}

interface Authority {
  subject: Buffer;
  publicKey: KeyObject;
  privateKey: KeyObject;
  notAfter: Date;
}

/** The CA's subject exactly as encoded in its certificate (chain building compares it byte for byte). */
function loadAuthority(ca: PemPair, mayBeLeaf = false): Authority {
  let cert: X509Certificate;
  let privateKey: KeyObject;
  try {
    cert = new X509Certificate(ca.certPem);
    privateKey = createPrivateKey(ca.keyPem);
  } catch (err) {
    throw invalid(`the CA certificate or key does not parse: ${(err as Error).message}`, err);
  }
  if (!cert.ca && !mayBeLeaf) throw invalid(`${cert.subject} is not a CA certificate`);
  if (!createPublicKey(privateKey).equals(cert.publicKey))
    throw invalid(`the CA key is not the key of ${cert.subject}`);
  // Certificate ::= SEQUENCE { tbsCertificate, ... }; TBSCertificate ::= SEQUENCE { [0] version, serial,
  // signature, issuer, validity, subject, ... }.
  const tbs = children(only(cert.raw, 0x30).content)[0];
  const fields = tbs ? children(tbs.content) : [];
  const subject = fields[fields[0]?.tag === 0xa0 ? 5 : 4];
  if (!subject || subject.tag !== 0x30) throw invalid(`${cert.subject}: no subject in the certificate`);
  return { subject: subject.raw, publicKey: cert.publicKey, privateKey, notAfter: new Date(cert.validTo) };
}

interface SignOptions {
  subject: Buffer;
  issuer: Buffer;
  publicKey: KeyObject;
  issuerPublicKey: KeyObject;
  signingKey: KeyObject;
  extensions: Buffer[];
  notBefore: Date;
  notAfter: Date;
}

function signCertificate(o: SignOptions): string {
  const serial = randomBytes(16);
  serial[0] = serial[0]! & 0x7f;
  const sigAlg = seq(oid(OID.ecdsaWithSha256));
  const extensions = [
    ...o.extensions,
    extension(OID.subjectKeyIdentifier, false, octets(keyId(o.publicKey))),
    extension(OID.authorityKeyIdentifier, false, seq(tlv(0x80, keyId(o.issuerPublicKey)))),
  ];
  const tbs = seq(
    explicit(0, integer(Buffer.from([2]))),
    integer(serial),
    sigAlg,
    o.issuer,
    seq(time(o.notBefore), time(o.notAfter)),
    o.subject,
    o.publicKey.export({ type: 'spki', format: 'der' }),
    explicit(3, seq(...extensions)),
  );
  const signature = sign('sha256', tbs, { key: o.signingKey, dsaEncoding: 'der' });
  return toPem(seq(tbs, sigAlg, bitString(signature)), 'CERTIFICATE');
}
