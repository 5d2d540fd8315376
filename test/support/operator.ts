import { appendFileSync } from 'node:fs';
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
 *
 * SBX_TEST_OPERATOR_KUBECONFIG runs it (when no `client` is given) with that kubeconfig instead of the admin one (test/deploy/rbac.test.ts:
 * a ServiceAccount bound to the generated RBAC), and SBX_TEST_DENIED_LOG gets one JSON line per request the
 * apiserver refused with 403 (from the client's rest_client_requests_total) when it stops.
 */
export async function startTestOperator(
  namespace: string,
  overrides: Partial<OperatorConfig> = {},
  client?: KubeClient,
): Promise<Operator & { stop(): Promise<void> }> {
  const cluster = await getTestCluster();
  const config = defaultConfig({
    kubeconfig: process.env.SBX_TEST_OPERATOR_KUBECONFIG || cluster.kubeconfigPath,
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
      const deniedLog = process.env.SBX_TEST_DENIED_LOG;
      if (deniedLog) {
        const requests = await op.manager.registry.getSingleMetric('rest_client_requests_total')?.get();
        for (const v of requests?.values ?? [])
          if (v.labels.code === '403') appendFileSync(deniedLog, `${JSON.stringify({ namespace, ...v.labels })}\n`);
      }
    },
  };
}
