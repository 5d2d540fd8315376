/**
 * Serving certificates of the conversion webhook (docs/api.md "Conversion webhook"): a Secret (`ca.crt`, `tls.crt`,
 * `tls.key`) is reused when present and still fit (valid for longer than the renew-before window, 30 days by default,
 * and covering the needed names), else an ECDSA P-256 CA and serving certificate are generated (a create race adopts
 * the winner); tls.crt/tls.key go to the cert dir; every webhook-converted CRD gets the client config and caBundle by
 * merge patch. With `manageCerts: false` (cert-manager) tls.crt/tls.key must already be in the cert dir and CRDs are
 * left alone.
 */
import { X509Certificate } from 'node:crypto';
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { SandboxError } from '../../errors.js';
import type { Logger } from '../../log/logger.js';
import { covers, createCertificateAuthority, issueCertificate, keyMatches } from '../../pki/index.js';
import type { WebhookCertStore } from './cert-store.js';

export const CA_COMMON_NAME = 'sandbox-conversion-webhook-ca';
export const DEFAULT_CERT_SECRET = 'sandbox-webhook-certs';
const DAY_MS = 24 * 3600 * 1000;

/** How long a generated bundle is valid and how long before its end it is replaced. */
export interface CertPolicy {
  validityMs: number;
  renewBeforeMs: number;
}

export const DEFAULT_CERT_POLICY: CertPolicy = { validityMs: 365 * DAY_MS, renewBeforeMs: 30 * DAY_MS };

/** Refuses a policy under which a fresh bundle would already be due (it would be renewed in a loop). */
export function checkCertPolicy(p: CertPolicy): CertPolicy {
  if (!(p.renewBeforeMs > 0) || !(p.validityMs > p.renewBeforeMs + 1000))
    throw new SandboxError(
      'webhook.cert-policy-invalid',
      `webhook certificate validity ${p.validityMs} ms must exceed its renew-before window ${p.renewBeforeMs} ms by more than a second`,
      { hint: 'lengthen the validity or shorten the renew-before window' },
    );
  return p;
}

/** When the serving certificate `certPem` is due for renewal under `policy`. */
export function renewalDueAt(certPem: string, policy: CertPolicy): number {
  return Date.parse(new X509Certificate(certPem).validTo) - policy.renewBeforeMs;
}

const human = (ms: number): string =>
  ms % DAY_MS === 0 ? `${ms / DAY_MS} days` : ms % 1000 === 0 ? `${ms / 1000} s` : `${ms} ms`;

export interface CertificateBundle {
  caPem: string;
  certPem: string;
  keyPem: string;
}

export interface WebhookIdentity {
  serviceName: string;
  namespace: string;
  clusterDomain: string;
  /** Extra SANs (DNS names or IPs), e.g. the host of a `clientConfig.url`. */
  extraSans?: readonly string[];
}

export function serviceSans(id: WebhookIdentity): string[] {
  const { serviceName: s, namespace: n, clusterDomain: d } = id;
  return [s, `${s}.${n}`, `${s}.${n}.svc`, `${s}.${n}.svc.${d}`, ...(id.extraSans ?? [])];
}

/** A fresh CA + serving certificate for `id`. */
export function generateBundle(
  id: WebhookIdentity,
  now = new Date(),
  policy: CertPolicy = DEFAULT_CERT_POLICY,
): CertificateBundle {
  const validity = { validityMs: policy.validityMs, now };
  const ca = createCertificateAuthority({ commonName: CA_COMMON_NAME }, validity);
  const leaf = issueCertificate(ca, {
    subject: { commonName: `${id.serviceName}.${id.namespace}.svc` },
    usages: ['server'],
    subjectAltNames: serviceSans(id),
    ...validity,
  });
  return { caPem: ca.certPem, certPem: leaf.certPem, keyPem: leaf.keyPem };
}

/** Why a bundle cannot be used for `id` (undefined when it can). */
export function unfitReason(
  bundle: Partial<CertificateBundle>,
  id: WebhookIdentity,
  now = new Date(),
  policy: CertPolicy = DEFAULT_CERT_POLICY,
): string | undefined {
  if (!bundle.caPem || !bundle.certPem || !bundle.keyPem) return 'incomplete';
  try {
    const ca = new X509Certificate(bundle.caPem);
    const cert = new X509Certificate(bundle.certPem);
    if (!cert.verify(ca.publicKey)) return 'serving certificate not signed by ca.crt';
    if (!keyMatches({ certPem: bundle.certPem, keyPem: bundle.keyPem })) return 'tls.key does not match tls.crt';
    if (Date.parse(cert.validTo) - now.getTime() <= policy.renewBeforeMs)
      return `expires within ${human(policy.renewBeforeMs)}`;
    for (const san of serviceSans(id)) if (!covers(cert, san)) return `does not cover ${san}`;
  } catch (err) {
    return `unparsable: ${(err as Error).message}`;
  }
  return undefined;
}

const fromSecret = (data: Record<string, string>): Partial<CertificateBundle> => ({
  caPem: data['ca.crt'],
  certPem: data['tls.crt'],
  keyPem: data['tls.key'],
});
const toSecret = (b: CertificateBundle): Record<string, string> => ({
  'ca.crt': b.caPem,
  'tls.crt': b.certPem,
  'tls.key': b.keyPem,
});

/** Loads the Secret's bundle, or creates/renews it. */
export async function ensureCertSecret(
  store: WebhookCertStore,
  secretName: string,
  id: WebhookIdentity,
  log: Logger,
  policy: CertPolicy = DEFAULT_CERT_POLICY,
): Promise<CertificateBundle> {
  for (let attempt = 0; attempt < 5; attempt++) {
    const existing = await store.getSecret(id.namespace, secretName);
    if (existing) {
      const bundle = fromSecret(existing.data);
      const reason = unfitReason(bundle, id, new Date(), policy);
      if (reason === undefined) {
        log.info({ secret: `${id.namespace}/${secretName}` }, 'reusing webhook certificates');
        return bundle as CertificateBundle;
      }
      const fresh = generateBundle(id, new Date(), policy);
      const result = await store.updateSecret(id.namespace, secretName, toSecret(fresh), existing.resourceVersion);
      if (result === 'updated') {
        log.info({ secret: `${id.namespace}/${secretName}`, reason }, 'renewed webhook certificates');
        return fresh;
      }
      continue;
    }
    const fresh = generateBundle(id, new Date(), policy);
    if ((await store.createSecret(id.namespace, secretName, toSecret(fresh))) === 'created') {
      log.info({ secret: `${id.namespace}/${secretName}` }, 'created webhook certificates');
      return fresh;
    }
    // Lost the create race: loop and adopt the winner's Secret.
  }
  throw new SandboxError(
    'webhook.certs-contended',
    `could not settle Secret ${id.namespace}/${secretName} after 5 attempts`,
    {
      hint: 'another process keeps rewriting it; check for a second operator with a different service name',
    },
  );
}

/** Writes tls.crt/tls.key into `certDir` atomically. */
export async function writeCertDir(
  certDir: string,
  bundle: Pick<CertificateBundle, 'certPem' | 'keyPem'>,
): Promise<void> {
  await mkdir(certDir, { recursive: true });
  for (const [file, content, mode] of [
    ['tls.crt', bundle.certPem, 0o644],
    ['tls.key', bundle.keyPem, 0o600],
  ] as const) {
    const tmp = join(certDir, `.${file}.tmp`);
    await writeFile(tmp, content, { mode });
    await rename(tmp, join(certDir, file));
  }
}

export async function readCertDir(certDir: string): Promise<Pick<CertificateBundle, 'certPem' | 'keyPem'>> {
  try {
    const [certPem, keyPem] = await Promise.all([
      readFile(join(certDir, 'tls.crt'), 'utf8'),
      readFile(join(certDir, 'tls.key'), 'utf8'),
    ]);
    return { certPem, keyPem };
  } catch (err) {
    throw new SandboxError('webhook.certs-missing', `no tls.crt/tls.key in ${certDir}`, {
      cause: err,
      hint: 'with --manage-webhook-certs=false the certificates must be provisioned (e.g. by cert-manager) before start',
    });
  }
}

export interface ConversionClientTarget {
  /** Service reference (sandbox-webhook-service in sandbox-system by default), used unless `url` is set. */
  service: { name: string; namespace: string; path: string; port?: number };
  /** `clientConfig.url` instead of a Service (the local platform reaches the operator by URL). */
  url?: string;
}

/** The merge patch that points a CRD's conversion webhook at us. */
export function conversionPatch(
  target: ConversionClientTarget,
  caPem: string,
  existingReviewVersions: string[] | undefined,
): Record<string, unknown> {
  const caBundle = Buffer.from(caPem).toString('base64');
  const clientConfig: Record<string, unknown> = target.url
    ? { url: target.url, service: null, caBundle }
    : { service: { ...target.service }, url: null, caBundle };
  const webhook: Record<string, unknown> = { clientConfig };
  if (!existingReviewVersions || existingReviewVersions.length === 0)
    webhook['conversionReviewVersions'] = ['v1', 'v1beta1'];
  return { spec: { conversion: { strategy: 'Webhook', webhook } } };
}

/** Patches every named CRD whose conversion strategy is Webhook; returns the names patched. */
export async function injectCaBundle(
  store: WebhookCertStore,
  crdNames: readonly string[],
  target: ConversionClientTarget,
  caPem: string,
  log: Logger,
): Promise<string[]> {
  const patched: string[] = [];
  for (const name of crdNames) {
    const state = await store.getCrdConversion(name);
    if (!state) {
      log.warn({ crd: name }, 'CRD not installed; conversion webhook not configured for it');
      continue;
    }
    if (state.strategy !== 'Webhook') {
      log.info({ crd: name, strategy: state.strategy }, 'CRD does not use webhook conversion; left alone');
      continue;
    }
    await store.mergePatchCrd(name, conversionPatch(target, caPem, state.conversionReviewVersions));
    patched.push(name);
  }
  log.info({ crds: patched }, 'conversion webhook caBundle injected');
  return patched;
}
