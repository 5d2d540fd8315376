/**
 * Many Sandboxes at once (upstream TestParallelSandboxes) and the L0 check: once every Sandbox is Ready, a steady
 * state makes no LIST and no write, and a forced resync of all of them writes nothing. The full-size measurement
 * (500 Sandboxes, 60 s, apiserver /metrics) is `node --import tsx bench/sandbox.ts`.
 */
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, it } from 'node:test';
import { eventually } from '../support/eventually.js';
import {
  isReady,
  operatorMetrics,
  sandboxManifest,
  createSandbox,
  sumSamples,
  testClient,
  withOperator,
} from './sandbox-fixtures.js';
import { Sandboxes } from '../../src/kube/index.js';
import type { SandboxObject } from '../../src/operator/sandbox/index.js';

const N = 50;
const STEADY_MS = 10_000;
const WRITE_VERBS = /^(create|update|patch|delete)(\/.*)?$/;

describe('Sandbox controller: scale and L0', () => {
  it(`TestParallelSandboxes (${N}) + L0: steady state and a forced resync make 0 LIST and 0 writes`, () =>
    withOperator('sb-l0', async ({ ns, op }) => {
      const client = await testClient();
      const names = Array.from({ length: N }, (_, i) => `par-${i}`);
      for (let i = 0; i < names.length; i += 10)
        await Promise.all(names.slice(i, i + 10).map((n) => createSandbox(sandboxManifest(ns, n, { service: true }))));
      await eventually(async () => (await client.list<SandboxObject>(Sandboxes, ns)).items.filter(isReady).length, {
        until: (n) => n === N,
        timeoutMs: 90_000,
        intervalMs: 500,
        what: `${N} Ready Sandboxes`,
      });

      const snapshot = async () => {
        const text = await operatorMetrics(op);
        return {
          lists: sumSamples(text, 'rest_client_requests_total', { verb: 'list' }),
          writes: sumSamples(text, 'rest_client_requests_total', { verb: WRITE_VERBS }),
          reconciles: sumSamples(text, 'controller_runtime_reconcile_total', { controller: 'sandbox' }),
          text,
        };
      };
      // Let the last status writes' watch events come back, then measure.
      await eventually(async () => [await snapshot(), await sleep(1000).then(snapshot)], {
        until: ([a, b]) => a!.writes === b!.writes,
        timeoutMs: 20_000,
        what: 'writes to settle',
      });
      const t0 = await snapshot();
      assert.ok(
        sumSamples(t0.text, 'rest_client_requests_total', { verb: 'create', resource: 'pods' }) >= N,
        'the operator exports its client requests',
      );
      await sleep(STEADY_MS);
      const t1 = await snapshot();
      op.manager.resyncAll();
      await eventually(snapshot, {
        until: (s) => s.reconciles >= t1.reconciles + N,
        what: 'the resync to be reconciled',
        timeoutMs: 20_000,
      });
      await sleep(1000);
      const t2 = await snapshot();
      const figures = {
        steadyLists: t1.lists - t0.lists,
        steadyWrites: t1.writes - t0.writes,
        resyncReconciles: t2.reconciles - t1.reconciles,
        resyncLists: t2.lists - t1.lists,
        resyncWrites: t2.writes - t1.writes,
      };
      process.stderr.write(
        `L0 (${N} Ready Sandboxes, ${STEADY_MS / 1000} s steady, operator's rest_client_requests_total): ${JSON.stringify(figures)}\n`,
      );
      assert.equal(figures.steadyLists, 0);
      assert.equal(figures.steadyWrites, 0);
      assert.equal(figures.resyncLists, 0);
      assert.equal(figures.resyncWrites, 0);

      // Metrics from the cache: the gauge and the creation latency histogram.
      assert.equal(
        sumSamples(t2.text, 'agent_sandboxes', {
          namespace: ns,
          ready_condition: 'true',
          expired: 'false',
          owned_by: 'None',
        }),
        N,
      );
      assert.equal(sumSamples(t2.text, 'agent_sandbox_creation_latency_ms_count', { namespace: ns }), N);
    }));
});
