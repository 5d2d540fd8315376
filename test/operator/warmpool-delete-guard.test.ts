/**
 * A pool's delete never takes a Sandbox a claim has just adopted (spec §8: adopted Sandboxes are unaffected). The
 * race — the claim's resourceVersion-guarded adoption patch lands before the pool's cache shows it — is injected
 * deterministically on the real apiserver: the pool reconciler runs on informers whose Sandbox watch is stopped
 * once synced, so its cache keeps the pre-adoption member while the adoption is written; then one pass, scaling the
 * pool down, tries to delete that member.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { LabelKeys } from '../../src/api/index.js';
import {
  controllerRef,
  Informer,
  Manager,
  Sandboxes,
  SandboxClaims,
  SandboxTemplates,
  SandboxWarmPools,
  type DeleteOptions,
  type KubeClient,
} from '../../src/kube/index.js';
import { silentLogger } from '../../src/log/logger.js';
import type { ClaimObj, PoolObj, SandboxObj, TemplateObj } from '../../src/operator/extensions/support.js';
import { buildWarmMember, WarmPoolReconciler } from '../../src/operator/extensions/warm-pool-controller.js';
import { defaultConfig } from '../../src/operator/options.js';
import { createTestNamespace } from '../support/cluster.js';
import { claimManifest, getSandboxOrUndefined, poolManifest, templateManifest, testClient } from './claim-support.js';

describe('warm pool delete guard (real apiserver, lagging pool cache)', () => {
  let ns: { name: string; cleanup(): Promise<void> };
  let client: KubeClient;
  const stops: AbortController[] = [];
  before(async () => {
    ns = await createTestNamespace('wp-del-guard');
    client = await testClient();
  });
  after(async () => {
    for (const s of stops) s.abort();
    await ns?.cleanup();
  });

  /** Start an informer and wait for its cache; `freeze` stops its watch, so the cache stops following. */
  async function synced<T extends SandboxObj | PoolObj | TemplateObj>(
    inf: Informer<T>,
  ): Promise<{ freeze(): Promise<void> }> {
    const stop = new AbortController();
    stops.push(stop);
    const running = inf.start(stop.signal);
    await inf.synced();
    return {
      freeze: async () => {
        stop.abort();
        await running;
      },
    };
  }

  it('a member adopted after the cache saw it is not deleted: the DELETE carries its resourceVersion and gets 409', async () => {
    const n = ns.name;
    // No operator runs in this namespace: the objects change only when the test changes them.
    const pool = await client.create<PoolObj>(SandboxWarmPools, poolManifest(n, 'pool', 'tpl', 0));
    const claim = await client.create<ClaimObj>(SandboxClaims, claimManifest(n, 'c', 'pool'));
    const member = await client.create<SandboxObj>(
      Sandboxes,
      buildWarmMember(pool, templateManifest(n, 'tpl'), 'h', true) as SandboxObj,
    );

    const sandboxes = new Informer<SandboxObj>(client, Sandboxes, { namespace: n });
    const pools = new Informer<PoolObj>(client, SandboxWarmPools, { namespace: n });
    const templates = new Informer<TemplateObj>(client, SandboxTemplates, { namespace: n });
    const sbWatch = await synced(sandboxes);
    await synced(pools);
    await synced(templates);
    await sbWatch.freeze(); // the Sandbox cache keeps `member` as it is now

    // The claim's adoption, as claim-adoption.ts writes it.
    const adopted = await client.patch<SandboxObj>(
      Sandboxes,
      n,
      member.metadata.name!,
      {
        metadata: {
          resourceVersion: member.metadata.resourceVersion,
          labels: { [LabelKeys.warmPoolSandbox]: null, [LabelKeys.claimUid]: claim.metadata.uid },
          ownerReferences: [controllerRef(claim, SandboxClaims)],
        },
      },
      'merge',
    );
    assert.equal(
      sandboxes.getByName(n, member.metadata.name!)?.metadata.resourceVersion,
      member.metadata.resourceVersion,
    );

    const deletes: Array<{ name: string; opts: DeleteOptions | undefined }> = [];
    const spy = new Proxy(client, {
      get(target, prop, receiver) {
        if (prop === 'delete')
          return (rt: unknown, namespace: string, name: string, opts?: DeleteOptions) => {
            deletes.push({ name, opts });
            return target.delete(rt as typeof Sandboxes, namespace, name, opts);
          };
        const v: unknown = Reflect.get(target, prop, receiver);
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
      },
    });
    const r = new WarmPoolReconciler({
      manager: new Manager({ client: spy }),
      config: defaultConfig({ watchNamespace: n }),
      log: silentLogger,
      pools,
      sandboxes,
      templates,
    });
    const poolUid = pool.metadata.uid!;
    assert.equal(r.membership.get(poolUid).members.size, 1, 'the lagging cache still counts the member');

    // The pool wants none: its one member (as the cache shows it) is the scale-down victim.
    const result = await r.reconcile({ key: `${n}/pool`, namespace: n, name: 'pool' });

    const now = await getSandboxOrUndefined(n, member.metadata.name!);
    assert.ok(now, 'the adopted Sandbox survives the pool');
    assert.equal(now.metadata.resourceVersion, adopted.metadata.resourceVersion);
    assert.equal(now.metadata.labels?.[LabelKeys.warmPoolSandbox], undefined);
    assert.deepEqual(deletes, [
      {
        name: member.metadata.name,
        opts: { preconditions: { uid: member.metadata.uid, resourceVersion: member.metadata.resourceVersion } },
      },
    ]);
    assert.ok(r.membership.satisfied(poolUid), 'the refused delete lowered its expectation');
    assert.ok(result && result.requeueAfterMs !== undefined && result.requeueAfterMs <= 200, 'looks again soon');
  });
});
