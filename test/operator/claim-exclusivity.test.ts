/**
 * Exclusivity under fire, the test-sized version of bench/claim-fire.ts (which runs the acceptance size: pool 50,
 * 1 000 claims, 20 clients, 2 SIGKILLs): pool 10, 150 claims from 10 concurrent clients, operator SIGKILLed and
 * restarted twice; once with a single operator and no leader election, once with two replicas electing a leader
 * (each kill takes the leader).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { runUnderFire } from '../../bench/claim-fire.js';
import { createTestNamespace, getTestCluster } from '../support/cluster.js';
import { testClient } from './claim-support.js';

const runs = [
  { title: 'one operator, no leader election', replicas: 1, leaderElection: false, timeout: 150_000 },
  // The default deployment: each kill takes the leader, so the standby's takeover is under fire too.
  { title: 'two replicas with leader election', replicas: 2, leaderElection: true, timeout: 240_000 },
];

for (const run of runs)
  describe(`SandboxClaim exclusivity under fire (SIGKILL + restart), ${run.title}`, () => {
    let ns: Awaited<ReturnType<typeof createTestNamespace>>;
    before(async () => {
      ns = await createTestNamespace('fire');
    });
    after(() => ns?.cleanup());

    it(
      'no Sandbox is owned by two claims, no claim controls two Sandboxes; every claim ends Ready or cleanly pending',
      { timeout: run.timeout },
      async () => {
        const cluster = await getTestCluster();
        const report = await runUnderFire({
          client: await testClient(),
          kubeconfig: cluster.kubeconfigPath,
          namespace: ns.name,
          poolSize: 10,
          claims: 150,
          clients: 10,
          kills: 2,
          replicas: run.replicas,
          leaderElection: run.leaderElection,
          progress: process.env.SBX_TEST_VERBOSE ? (l) => process.stderr.write(`${l}\n`) : undefined,
        });
        assert.deepEqual(report.violations, []);
        assert.equal(report.operatorStarts, run.replicas + 2);
        assert.ok(report.readyObserved + report.timedOut === report.claims);
        assert.ok(
          report.readyObserved >= report.claims * 0.9,
          `only ${report.readyObserved}/${report.claims} observed Ready`,
        );
        assert.ok(report.watchEvents > report.claims);
      },
    );
  });
