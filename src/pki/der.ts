/**
 * The slice of DER (ITU-T X.690) that X.509 issuance needs: encoders for the universal types a certificate is
 * made of, and a reader that walks one level of a constructed value (to lift the subject name and public key
 * bits out of an existing certificate). Definite lengths only, as DER requires.
 */

function length(n: number): Buffer {
  if (n < 0x80) return Buffer.from([n]);
  const bytes: number[] = [];
  for (let v = n; v > 0; v = Math.floor(v / 256)) bytes.unshift(v & 0xff);
  return Buffer.from([0x80 | bytes.length, ...bytes]);
}

export const tlv = (tag: number, content: Buffer): Buffer =>
  Buffer.concat([Buffer.from([tag]), length(content.length), content]);
export const seq = (...parts: Buffer[]): Buffer => tlv(0x30, Buffer.concat(parts));
export const set = (...parts: Buffer[]): Buffer => tlv(0x31, Buffer.concat(parts));
/** `[n] EXPLICIT` (context-specific, constructed). */
export const explicit = (n: number, content: Buffer): Buffer => tlv(0xa0 + n, content);
export const octets = (content: Buffer): Buffer => tlv(0x04, content);
export const bool = (v: boolean): Buffer => tlv(0x01, Buffer.from([v ? 0xff : 0x00]));
export const utf8 = (s: string): Buffer => tlv(0x0c, Buffer.from(s, 'utf8'));
export const bitString = (content: Buffer, unusedBits = 0): Buffer =>
  tlv(0x03, Buffer.concat([Buffer.from([unusedBits]), content]));

/** A non-negative INTEGER from big-endian bytes, minimally encoded. */
export function integer(bytes: Buffer): Buffer {
  let b = bytes;
  while (b.length > 1 && b[0] === 0 && (b[1]! & 0x80) === 0) b = b.subarray(1);
  if ((b[0]! & 0x80) !== 0) b = Buffer.concat([Buffer.from([0]), b]);
  return tlv(0x02, b);
}

export function oid(dotted: string): Buffer {
  const parts = dotted.split('.').map(Number);
  const bytes: number[] = [40 * parts[0]! + parts[1]!];
  for (const p of parts.slice(2)) {
    const chunk: number[] = [p & 0x7f];
    for (let v = Math.floor(p / 128); v > 0; v = Math.floor(v / 128)) chunk.unshift((v & 0x7f) | 0x80);
    bytes.push(...chunk);
  }
  return tlv(0x06, Buffer.from(bytes));
}

/** RFC 5280 §4.1.2.5: UTCTime through 2049, GeneralizedTime from 2050, both to the second in UTC. */
export function time(d: Date): Buffer {
  const iso = d.toISOString().replace(/[-:T]/g, '').slice(0, 14); // YYYYMMDDHHMMSS
  return d.getUTCFullYear() < 2050 ? tlv(0x17, Buffer.from(`${iso.slice(2)}Z`)) : tlv(0x18, Buffer.from(`${iso}Z`));
}

export interface Element {
  tag: number;
  /** The whole element, header included. */
  raw: Buffer;
  content: Buffer;
}

/** The elements directly inside `content` (the content octets of a constructed value). */
export function children(content: Buffer): Element[] {
  const out: Element[] = [];
  let at = 0;
  while (at < content.length) {
    if (at + 2 > content.length) throw new Error('DER: truncated header');
    const tag = content[at]!;
    if ((tag & 0x1f) === 0x1f) throw new Error('DER: multi-byte tags are not used in X.509');
    let len = content[at + 1]!;
    let header = 2;
    if (len & 0x80) {
      const n = len & 0x7f;
      if (n === 0 || n > 4 || at + 2 + n > content.length) throw new Error('DER: bad length');
      len = 0;
      for (let i = 0; i < n; i++) len = len * 256 + content[at + 2 + i]!;
      header += n;
    }
    const end = at + header + len;
    if (end > content.length) throw new Error('DER: element overruns its container');
    out.push({ tag, raw: content.subarray(at, end), content: content.subarray(at + header, end) });
    at = end;
  }
  return out;
}

/** The content of a DER value that must be exactly one element with `tag`. */
export function only(der: Buffer, tag: number): Element {
  const [el, ...rest] = children(der);
  if (!el || rest.length > 0 || el.tag !== tag)
    throw new Error(`DER: expected one element with tag 0x${tag.toString(16)}`);
  return el;
}

export function toPem(der: Buffer, label: string): string {
  const b64 = der.toString('base64').replace(/(.{64})/g, '$1\n');
  return `-----BEGIN ${label}-----\n${b64}${b64.endsWith('\n') ? '' : '\n'}-----END ${label}-----\n`;
}
