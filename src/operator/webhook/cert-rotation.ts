/**
 * Keeping the conversion webhook's serving certificate current without restarting its server (new handshakes
 * get the new certificate, open connections and requests in flight keep theirs):
 * - managed certificates are renewed before they expire: the Secret is renewed (or another replica's renewal
 *   adopted), the CRDs' caBundle is given the new CA next to the old one, and only after the apiserver had a
 *   moment to see it does the server switch, so no conversion is served by a CA the apiserver does not trust;
 * - provided certificates (cert-manager, a Secret volume the kubelet swaps through its `..data` symlink) are
 *   reloaded when the cert dir changes, seen by a directory watch and, should the watch miss it, by polling; a
 *   pair whose key does not match its certificate (half an update) is not served.
 */
import { watch } from 'node:fs';
import { X509Certificate } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from '../../log/logger.js';
import { keyMatches } from '../../pki/index.js';
import type { WebhookCertStore } from './cert-store.js';
import {
  ensureCertSecret,
  injectCaBundle,
  readCertDir,
  renewalDueAt,
  writeCertDir,
  type CertificateBundle,
  type CertPolicy,
  type ConversionClientTarget,
  type WebhookIdentity,
} from './certs.js';
import type { ConversionWebhookServer, TlsMaterial } from './server.js';

/** setTimeout's ceiling is ~24.8 days; longer waits are taken in steps. */
const MAX_WAIT_MS = 24 * 3600 * 1000;

/** Resolves after `ms`, or at once when `signal` aborts. */
const pause = (ms: number, signal: AbortSignal): Promise<void> =>
  sleep(ms, undefined, { signal }).catch(() => undefined);

export interface ManagedRenewalOptions {
  store: WebhookCertStore;
  secretName: string;
  id: WebhookIdentity;
  policy: CertPolicy;
  certDir: string;
  server: ConversionWebhookServer;
  crdNames: readonly string[];
  target: ConversionClientTarget;
  initial: CertificateBundle;
  log: Logger;
  signal: AbortSignal;
}

/** Renews the managed bundle whenever it is due, until `signal` aborts; `current()` is the bundle being served. */
export function renewManagedCerts(o: ManagedRenewalOptions): { current(): CertificateBundle; done: Promise<void> } {
  let current = o.initial;
  // Both scale with the window so a test with seconds-long certificates sees the same sequence as a year-long one.
  const retryMs = Math.min(30_000, Math.max(100, o.policy.renewBeforeMs / 20));
  const propagationMs = Math.min(5_000, o.policy.renewBeforeMs / 10);

  const switchTo = async (next: CertificateBundle): Promise<void> => {
    if (next.caPem !== current.caPem) {
      const oldCaValid = Date.parse(new X509Certificate(current.caPem).validTo) > Date.now();
      const trusted = oldCaValid ? `${next.caPem}${current.caPem}` : next.caPem;
      await injectCaBundle(o.store, o.crdNames, o.target, trusted, o.log);
      await pause(propagationMs, o.signal);
      if (o.signal.aborted) return;
    }
    await writeCertDir(o.certDir, next);
    o.server.setCertificate(next);
    current = next;
    o.log.info({ validTo: new X509Certificate(next.certPem).validTo }, 'webhook serving certificate renewed');
  };

  const loop = async (): Promise<void> => {
    while (!o.signal.aborted) {
      const wait = renewalDueAt(current.certPem, o.policy) - Date.now();
      if (wait > 0) {
        await pause(Math.min(wait, MAX_WAIT_MS), o.signal);
        continue;
      }
      try {
        const next = await ensureCertSecret(o.store, o.secretName, o.id, o.log, o.policy);
        if (next.certPem === current.certPem) await pause(retryMs, o.signal);
        else await switchTo(next);
      } catch (err) {
        if (o.signal.aborted) return;
        o.log.warn({ err, retryMs }, 'webhook certificate renewal failed; serving the current one and retrying');
        await pause(retryMs, o.signal);
      }
    }
  };
  return { current: () => current, done: loop() };
}

export interface CertDirWatchOptions {
  certDir: string;
  server: ConversionWebhookServer;
  initial: TlsMaterial;
  /** Polling period behind the directory watch. */
  intervalMs: number;
  log: Logger;
  signal: AbortSignal;
}

/** Serves the cert dir's tls.crt/tls.key whenever they change to a matching pair, until `signal` aborts. */
export function watchCertDir(o: CertDirWatchOptions): void {
  let current = o.initial;
  let rejected: string | undefined;
  const check = async (): Promise<void> => {
    let next: TlsMaterial;
    try {
      next = await readCertDir(o.certDir);
    } catch (err) {
      if (rejected !== 'missing') o.log.warn({ err }, 'webhook cert dir unreadable; serving the current certificate');
      rejected = 'missing';
      return;
    }
    if (next.certPem === current.certPem && next.keyPem === current.keyPem) return;
    let reason: string | undefined;
    try {
      if (!keyMatches(next)) reason = 'tls.key does not match tls.crt';
      else o.server.setCertificate(next);
    } catch (err) {
      reason = (err as Error).message;
    }
    if (reason !== undefined) {
      // An update in progress shows this until its second file lands; say it once per content.
      if (rejected !== next.certPem + next.keyPem)
        o.log.warn({ certDir: o.certDir, reason }, 'new webhook certificate not loaded; serving the current one');
      rejected = next.certPem + next.keyPem;
      return;
    }
    current = next;
    rejected = undefined;
    o.log.info(
      { certDir: o.certDir, validTo: new X509Certificate(next.certPem).validTo },
      'webhook serving certificate reloaded',
    );
  };

  let chain = Promise.resolve();
  const recheck = () => {
    chain = chain.then(check).catch((err: unknown) => o.log.warn({ err }, 'webhook cert dir check failed'));
  };
  // Debounced: a writer that replaces the two files one by one triggers one check after the second.
  let debounce: NodeJS.Timeout | undefined;
  const onEvent = () => {
    clearTimeout(debounce);
    debounce = setTimeout(recheck, 100);
  };
  let watcher: ReturnType<typeof watch> | undefined;
  try {
    watcher = watch(o.certDir, { persistent: false }, onEvent);
    watcher.on('error', (err) => o.log.debug({ err }, 'webhook cert dir watch ended; polling only'));
  } catch (err) {
    o.log.warn({ err, certDir: o.certDir }, 'cannot watch the webhook cert dir; polling only');
  }
  const poll = setInterval(recheck, o.intervalMs).unref();
  o.signal.addEventListener(
    'abort',
    () => {
      watcher?.close();
      clearInterval(poll);
      clearTimeout(debounce);
    },
    { once: true },
  );
}
