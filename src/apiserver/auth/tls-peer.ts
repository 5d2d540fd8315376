/**
 * The TLS peer's certificates, and a memo of what was concluded about them per connection. The aggregator keeps
 * its connections alive, so verifying the chain once per connection instead of once per request takes the
 * signature checks off the claim path. A memo stands until the settings change (generation), the chain's first
 * certificate expires, or its recheck time passes; renegotiation is turned off on a connection with a memo, so
 * the certificate a verdict was about is the one the connection keeps.
 */
import { X509Certificate } from 'node:crypto';
import type { DetailedPeerCertificate, TLSSocket } from 'node:tls';

export interface PeerCertificates {
  /** Leaf first, then the issuers the peer sent (node may complete the chain from the server's `ca`). */
  chain: X509Certificate[];
  /** The leaf's subject as node decodes it (values UTF-8, unescaped; a repeated attribute is an array). */
  subject: Record<string, string | string[]>;
}

function isTlsSocket(socket: unknown): socket is TLSSocket {
  return typeof (socket as TLSSocket | undefined)?.getPeerCertificate === 'function';
}

/** The peer's certificates, or undefined when it sent none (or the connection is not TLS). */
export function peerCertificates(socket: unknown): PeerCertificates | undefined {
  if (!isTlsSocket(socket)) return undefined;
  // with no peer certificate node returns an empty object, not null
  const leaf: Partial<DetailedPeerCertificate> = socket.getPeerCertificate(true);
  if (!leaf || !Buffer.isBuffer(leaf.raw)) return undefined;
  const chain: X509Certificate[] = [];
  const seen = new Set<object>();
  // a self-signed root is its own issuerCertificate
  for (let c: Partial<DetailedPeerCertificate> | undefined = leaf; c?.raw && !seen.has(c); c = c.issuerCertificate) {
    seen.add(c);
    chain.push(new X509Certificate(c.raw));
  }
  return { chain, subject: (leaf.subject ?? {}) as unknown as Record<string, string | string[]> };
}

/** One attribute of a subject: the last value when repeated, as Go's pkix.Name keeps for CommonName. */
export function lastValue(subject: Record<string, string | string[]>, key: string): string {
  const v = subject[key];
  return (Array.isArray(v) ? v[v.length - 1] : v) ?? '';
}

export function allValues(subject: Record<string, string | string[]>, key: string): string[] {
  const v = subject[key];
  return v === undefined ? [] : Array.isArray(v) ? [...v] : [v];
}

interface Memo<V> {
  generation: number;
  recheckAt: number;
  value: V;
}

export class PerConnection<V> {
  private readonly memos = new WeakMap<object, Memo<V>>();

  get(socket: unknown, generation: number, now = Date.now()): V | undefined {
    if (typeof socket !== 'object' || socket === null) return undefined;
    const m = this.memos.get(socket);
    if (!m || m.generation !== generation || now >= m.recheckAt) return undefined;
    return m.value;
  }

  set(socket: unknown, generation: number, value: V, recheckAt: number): void {
    if (!isTlsSocket(socket)) return; // a plain socket has no certificate to remember anything about
    socket.disableRenegotiation();
    this.memos.set(socket, { generation, recheckAt, value });
  }
}
