/**
 * A claim seen Ready already says what it is (docs/claim-model.md "The pass", step 5; upstream's observability
 * and warm-adoption volume-claim e2e tests watch for it): on the very watch event where a claim's Ready condition
 * first turns True, its `sandbox-name` and `controller-first-observed-at` annotations are there, for a warm adoption
 * and for a cold create, and a warm claim costs no more writes than before (two on the claim: annotations and
 * status; one on the Sandbox: the adoption). The same event carries `status.sandbox.serviceFQDN`, mirrored from the
 * bound Sandbox (upstream 1.0), which the claim drops when its Sandbox no longer has a Service.
 *
 * The operator runs with its own client, wrapped to record every write it sends (resource, name, subresource).
 */
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { AnnotationKeys } from '../../src/api/index.js';
import { KubeClient, SandboxClaims, Sandboxes, type KubeObject } from '../../src/kube/index.js';
import type { ClaimObj, SandboxObj } from '../../src/operator/extensions/support.js';
import { createTestNamespace, getTestCluster } from '../support/cluster.js';
import { eventually } from '../support/eventually.js';
import { startTestOperator } from '../support/operator.js';
import {
  claimManifest,
  cond,
  createAll,
  getClaim,
  getSandboxOrUndefined,
  poolManifest,
  templateManifest,
  testClient,
  waitPoolReady,
} from './claim-support.js';

interface Write {
  verb: string;
  resource: string;
  name: string;
}

/** Record every write `client` sends (the operator's), before it is sent. */
function recordWrites(client: KubeClient): Write[] {
  const log: Write[] = [];
  const { create, update, patch, delete: del } = client;
  client.create = ((rt, obj, opts) => {
    log.push({ verb: 'create', resource: rt.plural, name: obj.metadata.name ?? '' });
    return create.call(client, rt, obj, opts);
  }) as KubeClient['create'];
  client.update = ((rt, obj, opts) => {
    log.push({
      verb: opts?.subresource ? `update/${opts.subresource}` : 'update',
      resource: rt.plural,
      name: obj.metadata.name ?? '',
    });
    return update.call(client, rt, obj, opts);
  }) as KubeClient['update'];
  client.patch = ((rt, ns, name, body, type, opts) => {
    log.push({ verb: opts?.subresource ? `patch/${opts.subresource}` : 'patch', resource: rt.plural, name });
    return patch.call(client, rt, ns, name, body, type, opts);
  }) as KubeClient['patch'];
  client.delete = ((rt, ns, name, opts) => {
    log.push({ verb: 'delete', resource: rt.plural, name });
    return del.call(client, rt, ns, name, opts);
  }) as KubeClient['delete'];
  return log;
}

describe('a claim turns Ready already naming its Sandbox, with serviceFQDN', () => {
  let ns: string;
  let client: KubeClient;
  let writes: Write[];
  let stop: () => Promise<void>;
  before(async () => {
    const cluster = await getTestCluster();
    const namespace = await createTestNamespace('claim-ready');
    ns = namespace.name;
    const opClient = await KubeClient.fromKubeconfig(cluster.kubeconfigPath, { qps: -1 });
    writes = recordWrites(opClient);
    const op = await startTestOperator(ns, {}, opClient);
    stop = async () => {
      await op.stop();
      await namespace.cleanup();
    };
    client = await testClient();
    await createAll(client, templateManifest(ns, 'tpl', { service: true }), poolManifest(ns, 'pool', 'tpl', 2));
    // An empty pool of the same template: its claims are created cold.
    await createAll(client, undefined, poolManifest(ns, 'empty', 'tpl', 0));
    await waitPoolReady(ns, 'pool', 2);
  });
  after(() => stop?.());

  /** Create the claim and return the first watch event of it with Ready=True (and every event before it). */
  async function createAndWatchReady(claim: ClaimObj): Promise<{ ready: ClaimObj; seen: ClaimObj[] }> {
    const list = await client.list<ClaimObj>(SandboxClaims, ns);
    const seen: ClaimObj[] = [];
    const ctrl = new AbortController();
    const watching = client
      .watch<ClaimObj>(
        SandboxClaims,
        ns,
        { resourceVersion: list.metadata.resourceVersion, fieldSelector: `metadata.name=${claim.metadata.name}` },
        (ev) => void (ev.type !== 'BOOKMARK' && seen.push(ev.object)),
        ctrl.signal,
      )
      .catch(() => {});
    try {
      await client.create(SandboxClaims, claim);
      const ready = await eventually(async () => seen.find((c) => cond(c)?.status === 'True'), {
        until: (c) => c !== undefined,
        timeoutMs: 60_000,
        what: `a watch event with claim ${claim.metadata.name} Ready`,
      });
      return { ready: ready!, seen };
    } finally {
      ctrl.abort();
      await watching;
    }
  }

  function assertNamesItsSandbox(ready: ClaimObj, testStart: number): void {
    const a = ready.metadata.annotations ?? {};
    const sbName = ready.status?.sandbox?.name;
    assert.ok(sbName, 'the Ready event names the Sandbox in status');
    assert.equal(
      a[AnnotationKeys.sandboxName],
      sbName,
      `the event (rv ${ready.metadata.resourceVersion}) where Ready first turned True carries sandbox-name`,
    );
    const first = a[AnnotationKeys.controllerFirstObservedAt];
    assert.ok(first, `the event (rv ${ready.metadata.resourceVersion}) carries controller-first-observed-at`);
    assert.match(first, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d*[1-9]Z$/);
    assert.ok(Date.parse(first) >= testStart - 1000);
  }

  it('warm adoption: annotations and serviceFQDN on the Ready event; two claim writes and one Sandbox write', async () => {
    const testStart = Date.now();
    const from = writes.length;
    const { ready } = await createAndWatchReady(claimManifest(ns, 'warm', 'pool'));
    assertNamesItsSandbox(ready, testStart);
    const sbName = ready.status!.sandbox!.name!;
    const sb = (await getSandboxOrUndefined(ns, sbName))!;
    assert.equal(sb.metadata.ownerReferences?.find((r) => r.controller)?.kind, 'SandboxClaim', 'a warm member adopted');
    assert.ok(sb.status?.serviceFQDN, 'the template asks for a Service');
    assert.equal(ready.status?.sandbox?.serviceFQDN, sb.status.serviceFQDN);

    // Once the operator is quiet again (the pool refilled, no write for a while), count what this claim cost.
    await waitPoolReady(ns, 'pool', 2);
    const count = () => writes.length;
    await eventually(async () => [count(), await sleep(1500).then(count)], {
      until: ([a, b]) => a === b,
      timeoutMs: 30_000,
      what: 'the operator writes nothing more',
    });
    const mine = writes.slice(from);
    const claimWrites = mine.filter((w) => w.resource === 'sandboxclaims' && w.name === 'warm').map((w) => w.verb);
    assert.deepEqual(claimWrites.sort(), ['patch', 'patch/status'], 'the claim is written twice, as before');
    const sandboxWrites = mine.filter((w) => w.resource === 'sandboxes' && w.name === sbName && !w.verb.includes('/'));
    assert.deepEqual(
      sandboxWrites.map((w) => w.verb),
      ['patch'],
      'the adopted Sandbox is written once outside its status (the adoption)',
    );
  });

  it('cold create: the annotations are on the Ready event too', async () => {
    const testStart = Date.now();
    const { ready, seen } = await createAndWatchReady(claimManifest(ns, 'cold', 'empty'));
    assertNamesItsSandbox(ready, testStart);
    assert.equal(ready.status?.sandbox?.name, 'cold', 'a cold Sandbox named like the claim');
    const sb = (await getSandboxOrUndefined(ns, 'cold'))!;
    assert.ok(sb.status?.serviceFQDN, 'the template asks for a Service');
    assert.equal(ready.status?.sandbox?.serviceFQDN, sb.status.serviceFQDN);
    assert.ok(
      seen.some((c) => c.status?.sandbox?.name === 'cold' && cond(c)?.status !== 'True'),
      'the claim was seen bound and not Ready first (the Ready turn came in a later pass)',
    );
  });

  it('serviceFQDN follows the Sandbox: cleared when its Service goes', async () => {
    const claim = await getClaim(ns, 'warm');
    const sbName = claim!.status!.sandbox!.name!;
    assert.ok(claim!.status!.sandbox!.serviceFQDN);
    await client.patch<SandboxObj>(Sandboxes, ns, sbName, { spec: { service: false } }, 'merge');
    const after = await eventually(() => getClaim(ns, 'warm'), {
      until: (c) => c?.status?.sandbox?.serviceFQDN === undefined,
      timeoutMs: 30_000,
      what: 'the claim drops serviceFQDN',
    });
    assert.equal(after!.status!.sandbox!.name, sbName, 'still bound to the same Sandbox');
    const sb = await client.get<KubeObject & { status?: { serviceFQDN?: string } }>(Sandboxes, ns, sbName);
    assert.equal(sb.status?.serviceFQDN, undefined);
  });
});
