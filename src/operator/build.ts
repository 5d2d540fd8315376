import { Registry } from 'prom-client';
import { KubeClient, Manager } from '../kube/index.js';
import type { Logger } from '../log/logger.js';
import { join } from 'node:path';
import { webhookCertificateExpiry } from './metrics.js';
import type { OperatorConfig } from './options.js';
import { KubeWebhookCertStore, startWebhook } from './webhook/index.js';

/**
 * The operator's composition root: the only place that constructs the client, the manager and the controllers.
 * Controllers register themselves through `register*` functions that receive the manager and the config.
 */
export interface Operator {
  manager: Manager;
  client: KubeClient;
  config: OperatorConfig;
  run(signal: AbortSignal): Promise<void>;
}

/** What a controller is registered with: the manager, the operator's config and a logger named after it. */
export interface ControllerContext {
  manager: Manager;
  config: OperatorConfig;
  log: Logger;
}

export type ControllerRegistration = (op: ControllerContext) => void | Promise<void>;

const registrations: Array<{ name: string; extension: boolean; register: ControllerRegistration }> = [];

/** Controllers add themselves here (see src/operator/controllers.ts). */
export function registerController(name: string, extension: boolean, register: ControllerRegistration): void {
  registrations.push({ name, extension, register });
}

export async function buildOperator(config: OperatorConfig, log: Logger, client?: KubeClient): Promise<Operator> {
  // One registry for the client and the manager, so /metrics carries rest_client_requests_total too.
  const registry = new Registry();
  const kube =
    client ??
    (await KubeClient.fromKubeconfig(config.kubeconfig, {
      qps: config.kubeApiQps,
      burst: config.kubeApiBurst,
      userAgent: 'sandbox-operator',
      registry,
    }));
  const manager = new Manager({
    client: kube,
    logger: log,
    registry,
    metricsBindAddress: config.metricsBindAddress,
    healthBindAddress: config.healthProbeBindAddress,
    leaderElection: config.leaderElect
      ? { namespace: config.leaderElectionNamespace, name: config.leaderElectionId }
      : undefined,
  });
  for (const r of registrations) {
    if (r.extension && !config.extensions) continue;
    await r.register({ manager, config, log: log.child({ controller: r.name }) });
  }
  let webhookReady = !config.enableWebhook;
  manager.addReadyCheck('conversion-webhook', () => webhookReady);
  if (config.enableWebhook) {
    webhookCertificateExpiry(registry, join(config.webhookCertDir, 'tls.crt'));
    // Conversion must serve even while another replica holds the lease: not leader-gated.
    manager.add({
      name: 'conversion-webhook',
      needsLeader: false,
      start: async (signal) => {
        const hook = await startWebhook({
          port: config.webhookPort,
          host: config.webhookHost,
          maxBodyBytes: config.webhookMaxBodyBytes,
          certDir: config.webhookCertDir,
          manageCerts: config.manageWebhookCerts,
          serviceName: config.webhookServiceName,
          namespace: config.webhookNamespace,
          clusterDomain: config.clusterDomain,
          webhookUrl: config.webhookUrl,
          extensions: config.extensions,
          store: config.manageWebhookCerts ? new KubeWebhookCertStore(kube) : undefined,
          logger: log,
        });
        webhookReady = true;
        await new Promise<void>((r) =>
          signal.aborted ? r() : signal.addEventListener('abort', () => r(), { once: true }),
        );
        await hook.close();
      },
    });
  }
  return { manager, client: kube, config, run: (signal) => manager.start(signal) };
}
