/**
 * Minimal X.509 v3 issuance for the conversion webhook: an ECDSA P-256 CA and serving certificates signed by it
 * (spec §11). node:crypto makes the keys, signs, and parses/verifies certificates (`X509Certificate`) but does
 * not build them, so this file DER-encodes the TBSCertificate itself (RFC 5280): about a hundred lines instead
 * of a certificate library that needs a global reflect-metadata polyfill (docs/dependencies.md).
 * Tested by parsing the output with node's X509Certificate and by a real TLS handshake (test/api/webhook*.ts).
 */
import { createHash, createPublicKey, generateKeyPairSync, randomBytes, sign, type KeyObject } from 'node:crypto';
import { isIP } from 'node:net';

// ----------------------------------------------------------------------------------------------- DER

function length(n: number): Buffer {
  if (n < 0x80) return Buffer.from([n]);
  const bytes: number[] = [];
  for (let v = n; v > 0; v = Math.floor(v / 256)) bytes.unshift(v & 0xff);
  return Buffer.from([0x80 | bytes.length, ...bytes]);
}

const tlv = (tag: number, content: Buffer): Buffer =>
  Buffer.concat([Buffer.from([tag]), length(content.length), content]);
const seq = (...parts: Buffer[]): Buffer => tlv(0x30, Buffer.concat(parts));
const set = (...parts: Buffer[]): Buffer => tlv(0x31, Buffer.concat(parts));
const explicit = (n: number, content: Buffer): Buffer => tlv(0xa0 + n, content);
const octets = (content: Buffer): Buffer => tlv(0x04, content);
const bool = (v: boolean): Buffer => tlv(0x01, Buffer.from([v ? 0xff : 0x00]));
const utf8 = (s: string): Buffer => tlv(0x0c, Buffer.from(s, 'utf8'));
const bitString = (content: Buffer, unusedBits = 0): Buffer =>
  tlv(0x03, Buffer.concat([Buffer.from([unusedBits]), content]));

function integer(bytes: Buffer): Buffer {
  let b = bytes;
  while (b.length > 1 && b[0] === 0 && (b[1]! & 0x80) === 0) b = b.subarray(1);
  if ((b[0]! & 0x80) !== 0) b = Buffer.concat([Buffer.from([0]), b]);
  return tlv(0x02, b);
}

function oid(dotted: string): Buffer {
  const parts = dotted.split('.').map(Number);
  const bytes: number[] = [40 * parts[0]! + parts[1]!];
  for (const p of parts.slice(2)) {
    const chunk: number[] = [p & 0x7f];
    for (let v = Math.floor(p / 128); v > 0; v = Math.floor(v / 128)) chunk.unshift((v & 0x7f) | 0x80);
    bytes.push(...chunk);
  }
  return tlv(0x06, Buffer.from(bytes));
}

function time(d: Date): Buffer {
  const iso = d.toISOString().replace(/[-:T]/g, '').slice(0, 14); // YYYYMMDDHHMMSS
  const year = d.getUTCFullYear();
  return year < 2050 ? tlv(0x17, Buffer.from(`${iso.slice(2)}Z`)) : tlv(0x18, Buffer.from(`${iso}Z`));
}

// ----------------------------------------------------------------------------------------------- X.509

const OID = {
  ecdsaWithSha256: '1.2.840.10045.4.3.2',
  commonName: '2.5.4.3',
  basicConstraints: '2.5.29.19',
  keyUsage: '2.5.29.15',
  extKeyUsage: '2.5.29.37',
  subjectAltName: '2.5.29.17',
  subjectKeyIdentifier: '2.5.29.14',
  authorityKeyIdentifier: '2.5.29.35',
  serverAuth: '1.3.6.1.5.5.7.3.1',
} as const;

const name = (cn: string): Buffer => seq(set(seq(oid(OID.commonName), utf8(cn))));
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
      return tlv(0x82, Buffer.from(n, 'ascii'));
    }),
  );
}

function ipv6Bytes(ip: string): Buffer {
  const [head = '', tail = ''] = ip.split('::');
  const h = head ? head.split(':') : [];
  const t = ip.includes('::') ? (tail ? tail.split(':') : []) : [];
  const groups = [...h, ...Array<string>(8 - h.length - t.length).fill('0'), ...t];
  return Buffer.concat(groups.map((g) => Buffer.from([(parseInt(g, 16) >> 8) & 0xff, parseInt(g, 16) & 0xff])));
}

function keyId(spkiDer: Buffer): Buffer {
  // RFC 5280 §4.2.1.2 method 1 would hash only the key bits; hashing the whole SPKI is equally unique.
  return createHash('sha1').update(spkiDer).digest();
}

export interface KeyPair {
  privateKey: KeyObject;
  publicKey: KeyObject;
}

export function generateEcdsaP256(): KeyPair {
  return generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
}

export interface IssueOptions {
  commonName: string;
  /** The subject's public key. */
  publicKey: KeyObject;
  /** Issuer: its name and private key; omitted for a self-signed certificate (then `signingKey` is required). */
  issuer?: { commonName: string; privateKey: KeyObject; publicKey: KeyObject };
  signingKey?: KeyObject;
  isCa: boolean;
  /** DNS names and IP addresses. */
  subjectAltNames?: readonly string[];
  notBefore: Date;
  notAfter: Date;
}

/** Issues one certificate; returns it PEM-encoded. */
export function issueCertificate(opts: IssueOptions): string {
  const spki = opts.publicKey.export({ type: 'spki', format: 'der' });
  const issuerName = opts.issuer?.commonName ?? opts.commonName;
  const signingKey = opts.issuer?.privateKey ?? opts.signingKey;
  if (!signingKey) throw new Error('issueCertificate: no signing key');
  const issuerSpki = opts.issuer ? opts.issuer.publicKey.export({ type: 'spki', format: 'der' }) : spki;
  const serial = randomBytes(16);
  serial[0] = serial[0]! & 0x7f;
  const sigAlg = seq(oid(OID.ecdsaWithSha256));
  const extensions = [
    extension(OID.basicConstraints, true, opts.isCa ? seq(bool(true)) : seq()),
    extension(OID.keyUsage, true, opts.isCa ? keyUsage([0, 5, 6]) : keyUsage([0])),
    ...(opts.isCa ? [] : [extension(OID.extKeyUsage, false, seq(oid(OID.serverAuth)))]),
    ...(opts.subjectAltNames && opts.subjectAltNames.length > 0
      ? [extension(OID.subjectAltName, false, subjectAltNames(opts.subjectAltNames))]
      : []),
    extension(OID.subjectKeyIdentifier, false, octets(keyId(spki))),
    extension(OID.authorityKeyIdentifier, false, seq(tlv(0x80, keyId(issuerSpki)))),
  ];
  const tbs = seq(
    explicit(0, integer(Buffer.from([2]))),
    integer(serial),
    sigAlg,
    name(issuerName),
    seq(time(opts.notBefore), time(opts.notAfter)),
    name(opts.commonName),
    spki,
    explicit(3, seq(...extensions)),
  );
  const signature = sign('sha256', tbs, { key: signingKey, dsaEncoding: 'der' });
  return toPem(seq(tbs, sigAlg, bitString(signature)), 'CERTIFICATE');
}

export function toPem(der: Buffer, label: string): string {
  const b64 = der.toString('base64').replace(/(.{64})/g, '$1\n');
  return `-----BEGIN ${label}-----\n${b64}${b64.endsWith('\n') ? '' : '\n'}-----END ${label}-----\n`;
}

export function privateKeyPem(key: KeyObject): string {
  return key.export({ type: 'pkcs8', format: 'pem' }).toString();
}

export function publicKeyOf(privateKey: KeyObject): KeyObject {
  return createPublicKey(privateKey);
}
