import type { KubeClient } from '../../src/kube/index.js';
import { createLogger } from '../../src/log/logger.js';
import { buildOperator, type Operator } from '../../src/operator/build.js';
import '../../src/operator/controllers.js';
import { defaultConfig, type OperatorConfig } from '../../src/operator/options.js';
import { getTestCluster } from './cluster.js';

/**
 * Runs the real operator in this test process, scoped to one namespace so test files sharing the cluster do not
 * fight over each other's objects. No leader election, ephemeral metrics/health ports, no webhook by default.
 * `client`, when given, is the operator's client (a test that must see or time the operator's writes passes its own).
 */
export async function startTestOperator(
  namespace: string,
  overrides: Partial<OperatorConfig> = {},
  client?: KubeClient,
): Promise<Operator & { stop(): Promise<void> }> {
  const cluster = await getTestCluster();
  const config = defaultConfig({
    kubeconfig: cluster.kubeconfigPath,
    watchNamespace: namespace,
    leaderElect: false,
    metricsBindAddress: '127.0.0.1:0',
    healthProbeBindAddress: '127.0.0.1:0',
    enableWebhook: false,
    manageWebhookCerts: false,
    kubeApiQps: -1,
    ...overrides,
  });
  const log = createLogger({ level: process.env.SBX_TEST_LOG_LEVEL ?? 'warn', name: `operator:${namespace}` });
  const op = await buildOperator(config, log, client);
  const ctrl = new AbortController();
  const running = op.run(ctrl.signal);
  return {
    ...op,
    stop: async () => {
      ctrl.abort();
      await running;
      op.client.close();
    },
  };
}
