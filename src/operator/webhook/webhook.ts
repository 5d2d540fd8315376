/**
 * Composition of the conversion webhook inside the operator process: certificates (managed or provided),
 * CRD caBundle injection, the HTTPS server, then keeping its certificate current (cert-rotation.ts).
 */
import { SandboxError } from '../../errors.js';
import type { Logger } from '../../log/logger.js';
import { CONVERTIBLE_RESOURCES, crdNameOf, SandboxResource } from '../../api/index.js';
import type { WebhookCertStore } from './cert-store.js';
import { renewManagedCerts, watchCertDir } from './cert-rotation.js';
import {
  checkCertPolicy,
  DEFAULT_CERT_POLICY,
  DEFAULT_CERT_SECRET,
  ensureCertSecret,
  injectCaBundle,
  readCertDir,
  writeCertDir,
  type CertificateBundle,
  type ConversionClientTarget,
  type WebhookIdentity,
} from './certs.js';
import { CONVERT_PATH, startConversionWebhookServer, type ConversionWebhookServer } from './server.js';

export interface WebhookOptions {
  /** `--webhook-port` (9443); 0 picks a free port. */
  port: number;
  /**
   * Listen address. Default: the host of `webhookUrl`, the one address the apiserver dials; without a URL (the
   * Service, in a pod whose only other address is loopback) every interface.
   */
  host?: string;
  /** Largest ConversionReview accepted (`--webhook-max-body-bytes`; server.ts says why 32 MiB). */
  maxBodyBytes?: number;
  /** `--webhook-cert-dir`. */
  certDir: string;
  /** `--manage-webhook-certs`: create/load the Secret and patch CRDs; false leaves both to cert-manager. */
  manageCerts: boolean;
  /** `--webhook-service-name`, `--webhook-namespace`, `--cluster-domain`. */
  serviceName: string;
  namespace: string;
  clusterDomain: string;
  /** Secret holding ca.crt/tls.crt/tls.key; default `sandbox-webhook-certs`. */
  secretName?: string;
  /**
   * When set, CRDs get `clientConfig.url` (e.g. `https://10.0.0.1:9443/convert`) instead of the Service; a
   * function receives the bound port (for `port: 0`). Its host is added to the serving certificate's SANs.
   */
  webhookUrl?: string | ((port: number) => string);
  /** Extra serving-certificate SANs (DNS names or IPs). */
  extraSans?: readonly string[];
  /** `--extensions`: also configure the three extension CRDs (else only sandboxes.agents.x-k8s.io). */
  extensions: boolean;
  /** Required when manageCerts is true. */
  store?: WebhookCertStore;
  /** Managed certificates: how long they are valid (365 days) and how long before their end they are renewed (30 days). */
  certValidityMs?: number;
  renewBeforeMs?: number;
  /** Provided certificates: how often the cert dir is re-read behind its directory watch (10 s). */
  certReloadIntervalMs?: number;
  logger: Logger;
}

export interface WebhookHandle {
  readonly port: number;
  /** The CA of the certificate being served (managed mode); it changes when the certificate is renewed. */
  readonly caPem: string | undefined;
  readonly patchedCrds: readonly string[];
  close(): Promise<void>;
}

/** Names of the CRDs this operator serves conversion for. */
export function webhookCrdNames(extensions: boolean): string[] {
  return CONVERTIBLE_RESOURCES.filter((r) => extensions || r === SandboxResource).map(crdNameOf);
}

export async function startWebhook(opts: WebhookOptions): Promise<WebhookHandle> {
  const log = opts.logger.child({ component: 'conversion-webhook' });
  const extraSans: string[] = [...(opts.extraSans ?? [])];
  const urlFor = (port: number): string | undefined =>
    typeof opts.webhookUrl === 'function' ? opts.webhookUrl(port) : opts.webhookUrl;
  const probeUrl = urlFor(opts.port === 0 ? 1 : opts.port);
  let urlHost: string | undefined;
  if (probeUrl !== undefined) {
    try {
      urlHost = new URL(probeUrl).hostname.replace(/^\[|\]$/g, '');
    } catch (err) {
      throw new SandboxError('webhook.invalid-url', `invalid webhook URL ${JSON.stringify(probeUrl)}`, { cause: err });
    }
    extraSans.push(urlHost);
  }
  const listenHost = opts.host || urlHost;
  const id: WebhookIdentity = {
    serviceName: opts.serviceName,
    namespace: opts.namespace,
    clusterDomain: opts.clusterDomain,
    extraSans,
  };

  const policy = checkCertPolicy({
    validityMs: opts.certValidityMs ?? DEFAULT_CERT_POLICY.validityMs,
    renewBeforeMs: opts.renewBeforeMs ?? DEFAULT_CERT_POLICY.renewBeforeMs,
  });
  const secretName = opts.secretName ?? DEFAULT_CERT_SECRET;
  let bundle: CertificateBundle | undefined;
  let patchedCrds: string[] = [];
  let tls: { certPem: string; keyPem: string };
  if (opts.manageCerts) {
    if (!opts.store)
      throw new SandboxError('webhook.store-missing', 'managed webhook certificates need a Kubernetes client');
    bundle = await ensureCertSecret(opts.store, secretName, id, log, policy);
    await writeCertDir(opts.certDir, bundle);
    tls = bundle;
  } else {
    tls = await readCertDir(opts.certDir);
  }

  const server: ConversionWebhookServer = await startConversionWebhookServer({
    port: opts.port,
    ...(listenHost ? { host: listenHost } : {}),
    ...(opts.maxBodyBytes !== undefined ? { maxBodyBytes: opts.maxBodyBytes } : {}),
    tls,
    logger: log,
  });
  const stop = new AbortController();
  let current: () => CertificateBundle | undefined = () => undefined;
  let renewal: Promise<void> | undefined;
  try {
    if (opts.manageCerts && opts.store && bundle) {
      const crdNames = webhookCrdNames(opts.extensions);
      const target: ConversionClientTarget = {
        service: { name: opts.serviceName, namespace: opts.namespace, path: CONVERT_PATH },
        ...(probeUrl !== undefined ? { url: urlFor(server.port)! } : {}),
      };
      patchedCrds = await injectCaBundle(opts.store, crdNames, target, bundle.caPem, log);
      const renewer = renewManagedCerts({
        store: opts.store,
        secretName,
        id,
        policy,
        certDir: opts.certDir,
        server,
        crdNames,
        target,
        initial: bundle,
        log,
        signal: stop.signal,
      });
      current = renewer.current;
      renewal = renewer.done;
    } else {
      watchCertDir({
        certDir: opts.certDir,
        server,
        initial: tls,
        intervalMs: opts.certReloadIntervalMs ?? 10_000,
        log,
        signal: stop.signal,
      });
    }
  } catch (err) {
    stop.abort();
    await server.close();
    throw err;
  }
  return {
    port: server.port,
    get caPem() {
      return current()?.caPem;
    },
    patchedCrds,
    close: async () => {
      stop.abort();
      await renewal;
      await server.close();
    },
  };
}
