/**
 * The claim gateway when kube-apiserver does not answer (docs/claim-gateway.md "Adoption and release"): a sandboxd
 * of this test's own (real microVMs; it publishes no NodeInventory, so no other test's creates or pools land on
 * it) reaches kube-apiserver through a proxy that can hold every request and response, as a SIGSTOPped
 * kube-apiserver would. 50 claims during a 20 s stall all succeed at once and are all recorded after it, none
 * twice and no VM destroyed; after a crash, what was never recorded is recorded at start and a VM whose claim was
 * deleted meanwhile is released — and only that one.
 */
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { randomBytes } from 'node:crypto';
import { freePort } from '../../src/net/free-port.js';
import { aggregatedNamespace, getAggregated, TEST_TEMPLATE, type AggregatedEnv } from '../support/aggregated.js';
import { claimGatewayFixture, gatewayClaim, type ClaimObj } from '../support/claim-gateway.js';
import { eventually } from '../support/eventually.js';
import { startFaultProxy, type FaultProxy } from '../support/fault-proxy.js';
import { call, SandboxdProcess } from '../support/sandboxd-daemon.js';

const ROOT = 'outage-root-token';
const CLAIMS = 50;
const STALL_MS = 20_000;

describe('claim gateway: kube-apiserver unreachable, and a crash', () => {
  let env: AggregatedEnv;
  let ns: { name: string; cleanup(): Promise<void> };
  let token: string;
  let proxy: FaultProxy;
  let daemon: SandboxdProcess;
  let gw: string;
  let args: string[];

  const claimsInNamespace = async () =>
    (JSON.parse(await env.kubectl(['get', '-n', ns.name, 'sandboxclaims', '-o', 'json'])) as { items: ClaimObj[] })
      .items;
  const bound = (c: ClaimObj) => c.status?.conditions?.some((x) => x.type === 'Bound' && x.status === 'True');
  const claim = (name: string) => gatewayClaim(gw, token, { namespace: ns.name, name, warm_pool: 'pool' });
  const rows = async () =>
    ((await call(daemon.base, 'GET', '/v1/sandboxes', undefined, ROOT)).json.sandboxes as Array<{ id: string }>).map(
      (r) => r.id,
    );
  const releases = async () => {
    const text = await (await fetch(`${daemon.base}/metrics`, { headers: { authorization: `Bearer ${ROOT}` } })).text();
    return Number(/^sandboxd_releases_total (\d+)/m.exec(text)?.[1] ?? NaN);
  };

  before(async () => {
    env = await getAggregated();
    ns = await aggregatedNamespace('gwo');
    token = await claimGatewayFixture(env.kubectl, ns.name);
    proxy = await startFaultProxy(env.cluster.kubeconfigPath);
    daemon = await SandboxdProcess.create(`gw-outage-${randomBytes(3).toString('hex')}`, ROOT);
    gw = `127.0.0.1:${await freePort()}`;
    args = [
      `--claim-listen=${gw}`,
      `--kubeconfig=${proxy.kubeconfigPath}`,
      '--publish-inventory=false',
      '--vk-nodes=',
      `--pools=${TEST_TEMPLATE}=${CLAIMS + 4}`,
      // no refill during the test: the VMs claimed are the ones counted
      '--refill-delay=600000',
      '--max-claims=100',
      '--gateway-adoption-interval=2',
      '--destroy-on-exit',
    ];
    await daemon.start(args);
    await eventually(
      async () =>
        ((await call(daemon.base, 'GET', '/v1/info', undefined, ROOT)).json.pools as Array<{ warm: number }>)[0],
      { timeoutMs: 300_000, intervalMs: 500, until: (p) => (p?.warm ?? 0) >= CLAIMS + 4, what: 'the warm pool filled' },
    );
    // The gateway is ready once its informers synced and the caller's verdicts are cached.
    await eventually(() => gatewayClaim(gw, token, { namespace: ns.name, name: 'probe', warm_pool: 'nope' }), {
      timeoutMs: 30_000,
      until: (r) => r.status === 404,
      what: 'the gateway ready',
    });
  });
  after(async () => {
    proxy?.resume();
    await daemon?.remove();
    await proxy?.close();
    await ns?.cleanup();
  });

  it(`${CLAIMS} claims during a ${STALL_MS / 1000} s stall: all answered at once, all recorded after, none twice, none destroyed`, async () => {
    const first = await claim('warm-up');
    assert.equal(first.status, 200, JSON.stringify(first.json));
    await eventually(claimsInNamespace, { until: (cs) => cs.some((c) => c.metadata.name === 'warm-up' && bound(c)) });

    proxy.stall();
    const stalledAt = Date.now();
    const ids = new Map<string, string>([['warm-up', String(first.json.id)]]);
    let slowest = 0;
    for (let i = 0; i < CLAIMS; i++) {
      // spread over the stall, so claims after the 10 s verdict TTL run on verdicts kept while unreachable
      await sleep(Math.max(0, stalledAt + (i * (STALL_MS - 1000)) / CLAIMS - Date.now()));
      const r = await claim(`out-${i}`);
      assert.equal(r.status, 200, `claim ${i} at +${Date.now() - stalledAt} ms: ${JSON.stringify(r.json)}`);
      ids.set(`out-${i}`, String(r.json.id));
      slowest = Math.max(slowest, r.ms);
    }
    assert.ok(
      slowest < 1000,
      `every claim answered at once while kube-apiserver hung (slowest ${slowest.toFixed(1)} ms)`,
    );
    assert.equal((await claimsInNamespace()).length, 1, 'nothing was recorded during the stall');
    await sleep(Math.max(0, stalledAt + STALL_MS - Date.now()));
    proxy.resume();
    const resumedAt = Date.now();

    const recorded = await eventually(claimsInNamespace, {
      timeoutMs: 60_000,
      intervalMs: 500,
      until: (cs) => cs.filter(bound).length === CLAIMS + 1,
      what: `all ${CLAIMS + 1} claims recorded Bound`,
    });
    process.stderr.write(
      `all ${CLAIMS} stalled claims recorded ${Date.now() - resumedAt} ms after kube-apiserver answered again\n`,
    );
    assert.equal(recorded.length, CLAIMS + 1, 'no other SandboxClaim was made');
    const boundIds = recorded.map((c) => c.metadata.annotations!['sandbox.cocoonstack.io/claim-id']!);
    assert.equal(new Set(boundIds).size, CLAIMS + 1, 'no sandbox is bound to two claims');
    for (const c of recorded) {
      assert.equal(
        c.metadata.annotations!['sandbox.cocoonstack.io/claim-id'],
        ids.get(c.metadata.name!),
        c.metadata.name,
      );
      assert.equal(c.status!.sandbox!.name, c.metadata.name);
      assert.equal(c.status!.conditions!.filter((x) => x.type === 'Bound').length, 1);
    }
    const live = new Set(await rows());
    for (const id of ids.values()) assert.ok(live.has(id), `sandbox ${id} still on the node`);
    assert.equal(await releases(), 0, 'no VM was destroyed');
  });

  it('after a crash: unrecorded deliveries are recorded at start, a VM whose claim was deleted is released', async () => {
    const kept = await claim('kept');
    const doomed = await claim('doomed');
    assert.equal(kept.status, 200);
    assert.equal(doomed.status, 200);
    await eventually(claimsInNamespace, {
      until: (cs) => ['kept', 'doomed'].every((n) => cs.some((c) => c.metadata.name === n && bound(c))),
      what: 'kept and doomed recorded',
    });
    await sleep(200); // the ledger is written off the claim path (coalesced)
    proxy.stall();
    const late: Record<string, string> = {};
    for (const name of ['late-0', 'late-1', 'late-2']) {
      const r = await claim(name);
      assert.equal(r.status, 200, JSON.stringify(r.json));
      late[name] = String(r.json.id);
    }
    await sleep(200); // the claim table, likewise
    await daemon.kill();
    await env.kubectl(['delete', '-n', ns.name, 'sandboxclaim', 'doomed']);
    proxy.resume();
    await daemon.start(args);

    const cs = await eventually(claimsInNamespace, {
      timeoutMs: 60_000,
      intervalMs: 500,
      until: (list) => Object.keys(late).every((n) => list.some((c) => c.metadata.name === n && bound(c))),
      what: 'the deliveries made during the stall recorded after the restart',
    });
    for (const [name, id] of Object.entries(late))
      assert.equal(
        cs.find((c) => c.metadata.name === name)!.metadata.annotations!['sandbox.cocoonstack.io/claim-id'],
        id,
      );
    assert.ok(!cs.some((c) => c.metadata.name === 'doomed'), 'the deleted claim was not brought back');
    await eventually(rows, {
      timeoutMs: 30_000,
      until: (ids) => !ids.includes(String(doomed.json.id)),
      what: 'the VM of the deleted claim released',
    });
    const live = await rows();
    assert.ok(live.includes(String(kept.json.id)), 'the VM of a live claim is kept');
    for (const id of Object.values(late)) assert.ok(live.includes(id));
    assert.equal(await releases(), 1, 'exactly one VM released (this run of the daemon)');
  });
});
