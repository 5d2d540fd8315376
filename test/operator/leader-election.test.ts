/**
 * Leader election against the real apiserver: at most one operator reconciles at a time, whatever the network or
 * the clocks do. The operators are real `sandbox-operator` child processes with `--leader-elect=true` (default
 * timings: lease 15 s, renew deadline 10 s, retry 2 s); the cut-off link and the 500s come from an authenticating
 * proxy between one operator and the apiserver (test/support/fault-proxy.ts).
 */
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { OperatorProcess } from '../../bench/claim-driver.js';
import { ConfigMaps, KubeClient, Leases, LeaderElector, Manager, type Lease } from '../../src/kube/index.js';
import { createTestNamespace, getTestCluster } from '../support/cluster.js';
import { eventually } from '../support/eventually.js';
import { startFaultProxy, type FaultProxy } from '../support/fault-proxy.js';
import { testClient } from './claim-support.js';

const OPERATOR_LEASE = 'sandbox-operator.agents.x-k8s.io';
const microTime = (ms: number) => new Date(ms).toISOString().replace(/Z$/, '000Z');

describe('leader election', () => {
  let ns: Awaited<ReturnType<typeof createTestNamespace>>;
  const cleanups: Array<() => Promise<unknown>> = [];
  before(async () => {
    ns = await createTestNamespace('le');
  });
  after(async () => {
    for (const c of cleanups.reverse()) await c().catch(() => {});
    await ns?.cleanup();
  });

  const operator = (kubeconfig: string, lease = OPERATOR_LEASE) => {
    const op = new OperatorProcess(kubeconfig, ns.name, [
      '--leader-elect=true',
      `--leader-election-namespace=${ns.name}`,
      `--leader-election-id=${lease}`,
    ]);
    cleanups.push(() => op.kill('SIGKILL'));
    return op;
  };
  const proxy = async (): Promise<FaultProxy> => {
    const p = await startFaultProxy();
    cleanups.push(() => p.close());
    return p;
  };
  const holder = async (lease: string, not?: string) =>
    eventually(async () => (await testClient()).get<Lease>(Leases, ns.name, lease), {
      until: (l) => !!l.spec?.holderIdentity && l.spec.holderIdentity !== not,
      timeoutMs: 60_000,
      intervalMs: 200,
      what: `Lease ${lease} held${not ? ` by someone other than ${not}` : ''}`,
    });

  it('a leader cut off from the apiserver stops before the standby acquires', { timeout: 150_000 }, async () => {
    const cluster = await getTestCluster();
    const link = await proxy();
    const a = operator(link.kubeconfigPath, 'stall');
    a.start();
    const first = (await holder('stall')).spec!.holderIdentity!;
    const b = operator(cluster.kubeconfigPath, 'stall');
    b.start();
    // Let the standby start and watch the record for a few renewals, past one renew deadline, before the link goes.
    await sleep(12_000);
    const renewed = await (await testClient()).get<Lease>(Leases, ns.name, 'stall');
    assert.equal(renewed.spec?.holderIdentity, first, 'the first leader kept its lease while connected');
    assert.ok(a.running, 'the first leader is running while connected');
    link.stall();
    const stalledAt = Date.now();
    const taken = await holder('stall', first);
    const acquiredAt = Date.parse(taken.spec!.acquireTime!);
    const exit = await a.exited(60_000);
    assert.ok(exit, 'the cut-off leader was still running 60 s after the standby acquired');
    assert.ok(
      exit.at < acquiredAt,
      `the cut-off leader stopped ${exit.at - stalledAt} ms after the stall, the standby acquired at ${acquiredAt - stalledAt} ms: two leaders for ${exit.at - acquiredAt} ms`,
    );
    assert.ok(b.running, 'the new leader is running');
  });

  it('a standby survives transient 500s and takes over afterwards', { timeout: 120_000 }, async () => {
    const cluster = await getTestCluster();
    const a = operator(cluster.kubeconfigPath, 'errors');
    a.start();
    const first = (await holder('errors')).spec!.holderIdentity!;
    const link = await proxy();
    link.fail((_method, path) => path.startsWith('/apis/coordination.k8s.io/'));
    const b = operator(link.kubeconfigPath, 'errors');
    b.start();
    await eventually(() => link.injected, {
      until: (n) => n >= 3 || !b.running,
      timeoutMs: 60_000,
      what: 'three injected 500s on the standby',
    });
    assert.ok(b.running, `the standby exited after ${link.injected} 500(s): ${JSON.stringify(await b.exited(0))}`);
    link.clear();
    await sleep(2_000);
    assert.ok(b.running, 'the standby is running once the errors stopped');
    const held = await (await testClient()).get<Lease>(Leases, ns.name, 'errors');
    assert.equal(held.spec?.holderIdentity, first, 'the leader kept its lease meanwhile');
    await a.kill('SIGTERM'); // a graceful stop releases the lease
    const taken = await holder('errors', first);
    assert.ok(b.running, 'the standby that took over is running');
    assert.notEqual(taken.spec!.holderIdentity, first);
  });

  it('clock skew between holder and standby does not cause an early takeover', { timeout: 60_000 }, async () => {
    const c = await testClient();
    const lease = 'skew';
    // The holder is a process on a machine whose clock runs 10 minutes behind; this test plays it, renewing every
    // 500 ms with its own timestamps. The standby's injected clock runs 10 minutes ahead.
    const behind = () => Date.now() - 600_000;
    await c.create<Lease>(Leases, {
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: { name: lease, namespace: ns.name },
      spec: {
        holderIdentity: 'remote-holder',
        leaseDurationSeconds: 3,
        acquireTime: microTime(behind()),
        renewTime: microTime(behind()),
        leaseTransitions: 0,
      },
    });
    const stopHolder = new AbortController();
    let lastRenew = 0;
    const renewing = (async () => {
      while (!stopHolder.signal.aborted) {
        await sleep(500);
        const l = await c.get<Lease>(Leases, ns.name, lease);
        if (l.spec?.holderIdentity !== 'remote-holder') return;
        l.spec.renewTime = microTime(behind());
        await c.update(Leases, l);
        lastRenew = Date.now();
      }
    })();
    const elector = new LeaderElector(c, {
      namespace: ns.name,
      name: lease,
      identity: 'standby',
      leaseDurationMs: 3_000,
      renewDeadlineMs: 2_000,
      retryPeriodMs: 500,
      clock: () => Date.now() + 600_000,
    });
    const stop = new AbortController();
    cleanups.push(async () => stop.abort());
    let acquiredAt: number | undefined;
    const acquiring = elector.acquire(stop.signal).then(() => {
      if (!stop.signal.aborted) acquiredAt = Date.now();
    });
    await sleep(9_000); // three lease durations of a live holder
    stopHolder.abort();
    await renewing;
    assert.equal(acquiredAt, undefined, 'the standby took the lease from a holder that was renewing it');
    await eventually(() => acquiredAt, { until: (t) => t !== undefined, timeoutMs: 15_000, what: 'the takeover' });
    assert.ok(
      acquiredAt! - lastRenew >= 2_500,
      `the standby acquired ${acquiredAt! - lastRenew} ms after the holder's last renewal (lease 3 s)`,
    );
    assert.equal((await c.get<Lease>(Leases, ns.name, lease)).spec?.holderIdentity, 'standby');
    stop.abort();
    await acquiring;
  });

  it('renewals do not queue behind the controllers on the rate limiter', { timeout: 60_000 }, async () => {
    const cluster = await getTestCluster();
    const client = await KubeClient.fromKubeconfig(cluster.kubeconfigPath, { qps: 2, burst: 1 });
    cleanups.push(async () => client.close());
    const manager = new Manager({
      client,
      leaderElection: {
        namespace: ns.name,
        name: 'throttled',
        leaseDurationMs: 3_000,
        renewDeadlineMs: 2_000,
        retryPeriodMs: 500,
      },
    });
    let lost = 0;
    manager.onLostLeadership(() => lost++);
    // Controllers that keep the client's limiter saturated (20 requests always waiting at 2 QPS).
    manager.add({
      name: 'busy',
      needsLeader: false,
      start: async (signal) => {
        await Promise.all(
          Array.from({ length: 20 }, async () => {
            while (!signal.aborted) await client.get(ConfigMaps, ns.name, 'none').catch(() => {});
          }),
        );
      },
    });
    let leading = false;
    manager.add({
      name: 'gated',
      needsLeader: true,
      start: async (signal) => {
        leading = true;
        await new Promise((r) => signal.addEventListener('abort', r, { once: true }));
      },
    });
    const stop = new AbortController();
    cleanups.push(async () => stop.abort());
    const running = manager.start(stop.signal);
    await eventually(() => leading, { until: (v) => v, timeoutMs: 10_000, what: 'leadership' });
    await sleep(9_000); // three lease durations
    assert.equal(lost, 0, 'leadership was lost while the controllers kept the rate limiter busy');
    assert.ok(manager.isLeader);
    stop.abort();
    await running;
  });
});
