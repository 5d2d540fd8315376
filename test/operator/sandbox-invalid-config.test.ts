/**
 * Ready=False `InvalidConfiguration` (agent-sandbox 1.0; docs/operator.md "Status"): a Sandbox asks for a headless
 * Service (`spec.service: true`) but its name, which names the Service, cannot be a Service name (longer than 63
 * characters, or not a DNS-1035 label). Terminal: the message names the field, the pass neither fails nor
 * requeues (only an edit can fix it), and the edit that drops the Service makes the Sandbox Ready.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Services } from '../../src/kube/index.js';
import { serviceNameProblem } from '../../src/operator/sandbox/service-reconciler.js';
import {
  condition,
  createSandbox,
  isReady,
  operatorMetrics,
  patchSandbox,
  readyReason,
  sandboxManifest,
  sumSamples,
  testClient,
  waitForSandbox,
  withOperator,
} from './sandbox-fixtures.js';

describe('Sandbox InvalidConfiguration', () => {
  it('a name that cannot name a Service: 63 characters pass, 64 do not, nor a dot or a leading digit', () => {
    assert.equal(serviceNameProblem('a'.repeat(63)), undefined);
    assert.match(serviceNameProblem('a'.repeat(64)) ?? '', /^spec\.service: .*\(64 characters\).*no more than 63/);
    assert.match(serviceNameProblem('web.1') ?? '', /^spec\.service: .*DNS-1035 label/);
    assert.match(serviceNameProblem('1web') ?? '', /DNS-1035 label/);
  });

  it('a Sandbox named past 63 characters with spec.service: true is InvalidConfiguration, not retried', () =>
    withOperator('sb-invalid', async ({ ns, op }) => {
      const name = `long-${'a'.repeat(70)}`;
      await createSandbox(sandboxManifest(ns, name, { service: true }));
      // The Pod is still made (it needs no Service); once it is Ready, nothing is left for the pass to change.
      const sb = await waitForSandbox(
        ns,
        name,
        (s) => readyReason('InvalidConfiguration')(s) && !!s.status?.podIPs?.length,
        'InvalidConfiguration with the Pod running',
        60_000,
      );
      const ready = condition(sb, 'Ready')!;
      assert.equal(ready.status, 'False');
      assert.equal(
        ready.message,
        `spec.service: the headless Service is named after the Sandbox, and "${name}" (75 characters) is too long for a Service name: must be no more than 63 characters`,
      );
      assert.equal(sb.status?.service, undefined);
      assert.deepEqual((await (await testClient()).list(Services, ns)).items, [], 'no Service');
      const metrics = await operatorMetrics(op);
      const results = (result: string) =>
        sumSamples(metrics, 'controller_runtime_reconcile_total', { controller: 'sandbox', result });
      assert.equal(results('error'), 0, 'no pass failed');
      assert.equal(results('requeue_after'), 0, 'no pass asked to be retried');

      // The edit that fixes it is the next pass.
      await patchSandbox(ns, name, { spec: { service: false } });
      await waitForSandbox(ns, name, isReady, 'Ready without a Service');
    }));
});
