/**
 * The restart settle window (docs/extensions.md, "Crashes and restarts"): an operator without leader election that
 * finds claims no Sandbox names as controller leaves them alone for PREDECESSOR_SETTLE_MS, writing nothing, and binds
 * them after it. The operator is a child process, SIGKILLed and restarted with the claims pending.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { claim, OperatorProcess, setupPool, waitPool, watchAll } from '../../bench/claim-driver.js';
import { AnnotationKeys } from '../../src/api/index.js';
import { SandboxClaims } from '../../src/kube/index.js';
import { PREDECESSOR_SETTLE_MS } from '../../src/operator/extensions/claim-binding.js';
import type { ClaimObj } from '../../src/operator/extensions/support.js';
import { createTestNamespace, getTestCluster } from '../support/cluster.js';
import { eventually } from '../support/eventually.js';
import { cond, testClient } from './claim-support.js';

const CLAIMS = 4;

interface ClaimWrite {
  name: string;
  atMs: number;
  ready: string | undefined;
  reason: string | undefined;
  message: string | undefined;
  /** The Sandbox the write names: its status, or the `sandbox-name` annotation written just before it. */
  sandbox: string | undefined;
}

describe('SandboxClaim: operator SIGKILLed and restarted with claims pending', () => {
  let ns: Awaited<ReturnType<typeof createTestNamespace>>;
  let op: OperatorProcess | undefined;
  before(async () => {
    ns = await createTestNamespace('restart');
  });
  after(async () => {
    await op?.kill('SIGTERM');
    await ns?.cleanup();
  });

  it(
    'writes nothing to them during its settle window, never reports ReconcilerError, and binds them after it',
    { timeout: 180_000 },
    async () => {
      const c = await testClient();
      const cluster = await getTestCluster();
      await setupPool(c, ns.name, CLAIMS);
      op = new OperatorProcess(cluster.kubeconfigPath, ns.name);
      op.start();
      await waitPool(c, ns.name, 'pool', CLAIMS, 120_000);
      await op.kill('SIGKILL');

      // Created while no operator runs: the restarted one finds them at startup, unbound.
      for (let i = 0; i < CLAIMS; i++) await c.create(SandboxClaims, claim(ns.name, `pending-${i}`, 'pool'));
      const rv = (await c.list<ClaimObj>(SandboxClaims, ns.name, { limit: 1 })).metadata.resourceVersion!;
      const writes: ClaimWrite[] = [];
      const stop = new AbortController();
      const watching = watchAll<ClaimObj>(
        c,
        SandboxClaims,
        ns.name,
        rv,
        (type, cl) => {
          if (type !== 'MODIFIED') return;
          const ready = cond(cl);
          writes.push({
            name: cl.metadata.name!,
            atMs: Date.now(),
            ready: ready?.status,
            reason: ready?.reason,
            message: ready?.message,
            sandbox: cl.status?.sandbox?.name ?? cl.metadata.annotations?.[AnnotationKeys.sandboxName],
          });
        },
        stop.signal,
      );
      // The child's settle window starts when its claim controller is built, after this.
      const restartedAt = Date.now();
      try {
        op.start();
        await eventually(async () => (await c.list<ClaimObj>(SandboxClaims, ns.name)).items, {
          until: (items) => items.length === CLAIMS && items.every((x) => cond(x)?.status === 'True'),
          timeoutMs: 60_000,
          intervalMs: 250,
          what: 'every pending claim Ready after the restart',
        });
        // A list can be ahead of the watch: wait until the watch has delivered every claim's Ready write too, so the
        // checks below judge every write the operator made rather than those that happened to arrive first.
        await eventually(async () => new Set(writes.filter((w) => w.ready === 'True').map((w) => w.name)).size, {
          until: (n) => n === CLAIMS,
          timeoutMs: 30_000,
          intervalMs: 100,
          what: "the watch to deliver every claim's Ready write",
        });
      } finally {
        stop.abort();
        await watching;
      }

      assert.deepEqual(
        writes.filter((w) => w.reason === 'ReconcilerError'),
        [],
        'a claim reported ReconcilerError',
      );
      // Nothing is written to a claim before it is bound: its first write already names its Sandbox (on the pass
      // that turns it Ready that is the annotations' write, which goes before the status: docs/claim-model.md).
      assert.deepEqual(
        writes.filter((w) => !w.sandbox),
        [],
        'a claim was written before it was bound',
      );
      assert.deepEqual(
        writes.filter((w) => w.atMs < restartedAt + PREDECESSOR_SETTLE_MS),
        [],
        `a claim was written within ${PREDECESSOR_SETTLE_MS} ms of the restart`,
      );
      assert.deepEqual(new Set(writes.map((w) => w.name)).size, CLAIMS, 'every claim was written');
    },
  );
});
