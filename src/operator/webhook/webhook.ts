/**
 * Composition of the conversion webhook inside the operator process: certificates (managed or provided),
 * CRD caBundle injection, then the HTTPS server.
 */
import { SandboxError } from '../../errors.js';
import type { Logger } from '../../log/logger.js';
import { CONVERTIBLE_RESOURCES, crdNameOf, SandboxResource } from '../../api/index.js';
import type { WebhookCertStore } from './cert-store.js';
import {
  DEFAULT_CERT_SECRET,
  ensureCertSecret,
  injectCaBundle,
  readCertDir,
  writeCertDir,
  type WebhookIdentity,
} from './certs.js';
import { CONVERT_PATH, startConversionWebhookServer, type ConversionWebhookServer } from './server.js';

export interface WebhookOptions {
  /** `--webhook-port` (9443); 0 picks a free port. */
  port: number;
  host?: string;
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
  logger: Logger;
}

export interface WebhookHandle {
  readonly port: number;
  /** The CA the apiserver trusts (managed mode). */
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
  if (probeUrl !== undefined) {
    let host: string;
    try {
      host = new URL(probeUrl).hostname.replace(/^\[|\]$/g, '');
    } catch (err) {
      throw new SandboxError('InvalidWebhookUrl', `invalid webhook URL ${JSON.stringify(probeUrl)}`, { cause: err });
    }
    extraSans.push(host);
  }
  const id: WebhookIdentity = {
    serviceName: opts.serviceName,
    namespace: opts.namespace,
    clusterDomain: opts.clusterDomain,
    extraSans,
  };

  let caPem: string | undefined;
  let patchedCrds: string[] = [];
  let tls: { certPem: string; keyPem: string };
  if (opts.manageCerts) {
    if (!opts.store)
      throw new SandboxError('WebhookStoreMissing', 'managed webhook certificates need a Kubernetes client');
    const bundle = await ensureCertSecret(opts.store, opts.secretName ?? DEFAULT_CERT_SECRET, id, log);
    await writeCertDir(opts.certDir, bundle);
    caPem = bundle.caPem;
    tls = bundle;
  } else {
    tls = await readCertDir(opts.certDir);
  }

  const server: ConversionWebhookServer = await startConversionWebhookServer({
    port: opts.port,
    ...(opts.host !== undefined ? { host: opts.host } : {}),
    tls,
    logger: log,
  });
  try {
    if (opts.manageCerts && opts.store && caPem) {
      patchedCrds = await injectCaBundle(
        opts.store,
        webhookCrdNames(opts.extensions),
        {
          service: { name: opts.serviceName, namespace: opts.namespace, path: CONVERT_PATH },
          ...(probeUrl !== undefined ? { url: urlFor(server.port)! } : {}),
        },
        caPem,
        log,
      );
    }
  } catch (err) {
    await server.close();
    throw err;
  }
  return { port: server.port, caPem, patchedCrds, close: () => server.close() };
}
