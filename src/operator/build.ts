import { KubeClient, Manager } from '../kube/index.js';
import type { Logger } from '../log/logger.js';
import type { OperatorConfig } from './options.js';

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

export type ControllerRegistration = (op: {
  manager: Manager;
  config: OperatorConfig;
  log: Logger;
}) => void | Promise<void>;

const registrations: Array<{ name: string; extension: boolean; register: ControllerRegistration }> = [];

/** Controllers add themselves here (see src/operator/controllers.ts). */
export function registerController(name: string, extension: boolean, register: ControllerRegistration): void {
  registrations.push({ name, extension, register });
}

export async function buildOperator(config: OperatorConfig, log: Logger, client?: KubeClient): Promise<Operator> {
  const kube =
    client ??
    (await KubeClient.fromKubeconfig(config.kubeconfig, {
      qps: config.kubeApiQps,
      burst: config.kubeApiBurst,
      userAgent: 'sandbox-operator',
    }));
  const manager = new Manager({
    client: kube,
    logger: log,
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
  return { manager, client: kube, config, run: (signal) => manager.start(signal) };
}
