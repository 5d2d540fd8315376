/**
 * The serving certificate. Either given (`--tls-cert-file`/`--tls-private-key-file`, e.g. from cert-manager: the
 * files are re-read when they change, so a rotated certificate is served without a restart), or self-managed in
 * `--cert-dir`: a CA and a serving certificate for `<service>.<namespace>.svc` (the name the aggregator always
 * verifies, whatever address it dials) plus any extra names, reused while valid and renewed 30 days before
 * expiry. The CA is written as `ca.crt` there: it is the APIService's caBundle.
 */
import { X509Certificate } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { SandboxError } from '../errors.js';
import type { Logger } from '../log/logger.js';
import { covers, createCertificateAuthority, issueCertificate, keyMatches, type PemPair } from '../pki/index.js';

export interface ServingIdentity {
  serviceName: string;
  namespace: string;
  clusterDomain: string;
  /** Extra DNS names or IPs (the address kube-apiserver dials, when it dials one directly). */
  extraSans: readonly string[];
}

export type CertSource =
  | { kind: 'files'; certFile: string; keyFile: string }
  | { kind: 'self-managed'; dir: string; identity: ServingIdentity; validityMs?: number; renewBeforeMs?: number };

const YEAR_MS = 365 * 24 * 3600 * 1000;
const RENEW_BEFORE_MS = 30 * 24 * 3600 * 1000;
const CHECK_MS = 60_000;

export function servingSans(id: ServingIdentity): string[] {
  const { serviceName: s, namespace: n, clusterDomain: d } = id;
  return [`${s}.${n}.svc`, `${s}.${n}.svc.${d}`, s, `${s}.${n}`, ...id.extraSans];
}

function read(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (err) {
    throw new SandboxError('apiserver.cert', `cannot read ${path}: ${(err as Error).message}`, {
      cause: err,
      hint: 'check --tls-cert-file/--tls-private-key-file, or omit both to let the server manage its certificate',
    });
  }
}

/** Why a self-managed certificate must be replaced, or undefined when it can be served. */
function unfit(dir: string, id: ServingIdentity, renewBeforeMs: number): string | undefined {
  try {
    const pair = {
      certPem: readFileSync(join(dir, 'tls.crt'), 'utf8'),
      keyPem: readFileSync(join(dir, 'tls.key'), 'utf8'),
    };
    const ca = new X509Certificate(readFileSync(join(dir, 'ca.crt'), 'utf8'));
    const cert = new X509Certificate(pair.certPem);
    if (!cert.verify(ca.publicKey)) return 'not signed by ca.crt';
    if (!keyMatches(pair)) return 'tls.key does not match tls.crt';
    if (Date.parse(cert.validTo) - Date.now() < renewBeforeMs) return 'expires soon';
    const missing = servingSans(id).find((san) => !covers(cert, san));
    if (missing) return `does not cover ${missing}`;
    return undefined;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ENOENT' ? 'absent' : (err as Error).message;
  }
}

function writeAtomic(path: string, content: string, mode: number): void {
  writeFileSync(`${path}.tmp`, content, { mode });
  renameSync(`${path}.tmp`, path);
}

function ensureSelfManaged(
  src: Extract<CertSource, { kind: 'self-managed' }>,
  log: Logger,
): PemPair & { caPem: string } {
  const renewBefore = src.renewBeforeMs ?? RENEW_BEFORE_MS;
  mkdirSync(src.dir, { recursive: true, mode: 0o700 });
  const why = unfit(src.dir, src.identity, renewBefore);
  if (why) {
    const validityMs = src.validityMs ?? YEAR_MS;
    const ca = createCertificateAuthority({ commonName: 'sandbox-apiserver-ca' }, { validityMs: validityMs * 2 });
    const leaf = issueCertificate(ca, {
      subject: { commonName: `${src.identity.serviceName}.${src.identity.namespace}.svc` },
      usages: ['server'],
      subjectAltNames: servingSans(src.identity),
      validityMs,
    });
    writeAtomic(join(src.dir, 'ca.key'), ca.keyPem, 0o600);
    writeAtomic(join(src.dir, 'tls.key'), leaf.keyPem, 0o600);
    writeAtomic(join(src.dir, 'tls.crt'), leaf.certPem, 0o644);
    writeAtomic(join(src.dir, 'ca.crt'), ca.certPem, 0o644);
    log.info({ dir: src.dir, reason: why }, 'issued a self-managed serving certificate');
  }
  return {
    certPem: readFileSync(join(src.dir, 'tls.crt'), 'utf8'),
    keyPem: readFileSync(join(src.dir, 'tls.key'), 'utf8'),
    caPem: readFileSync(join(src.dir, 'ca.crt'), 'utf8'),
  };
}

/** Loads the certificate and keeps it current: `onChange` gets every new pair (to `setSecureContext`). */
export class ServingCertificate {
  private pair: PemPair;
  private stamp = '';
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly src: CertSource,
    private readonly log: Logger,
  ) {
    this.pair = this.load();
    this.stamp = this.fileStamp();
  }

  get current(): PemPair {
    return this.pair;
  }

  /** The CA to trust this server with (self-managed only). */
  caPem(): string | undefined {
    return this.src.kind === 'self-managed' ? readFileSync(join(this.src.dir, 'ca.crt'), 'utf8') : undefined;
  }

  watch(onChange: (pair: PemPair) => void): void {
    this.timer = setInterval(() => {
      try {
        const stamp = this.fileStamp();
        const renew =
          this.src.kind === 'self-managed' &&
          unfit(this.src.dir, this.src.identity, this.src.renewBeforeMs ?? RENEW_BEFORE_MS);
        if (stamp === this.stamp && !renew) return;
        this.pair = this.load();
        this.stamp = this.fileStamp();
        this.log.info({ source: this.src.kind }, 'serving certificate changed; new connections use it');
        onChange(this.pair);
      } catch (err) {
        this.log.warn({ err }, 'could not reload the serving certificate; keeping the current one');
      }
    }, CHECK_MS);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }

  private load(): PemPair {
    if (this.src.kind === 'files') {
      const pair = { certPem: read(this.src.certFile), keyPem: read(this.src.keyFile) };
      if (!keyMatches(pair))
        throw new SandboxError('apiserver.cert', `${this.src.keyFile} is not the key of ${this.src.certFile}`);
      return pair;
    }
    const { certPem, keyPem } = ensureSelfManaged(this.src, this.log);
    return { certPem, keyPem };
  }

  private fileStamp(): string {
    const files =
      this.src.kind === 'files'
        ? [this.src.certFile, this.src.keyFile]
        : [join(this.src.dir, 'tls.crt'), join(this.src.dir, 'tls.key')];
    return files.map((f) => `${statSync(f).mtimeMs}:${statSync(f).size}`).join('|');
  }
}
