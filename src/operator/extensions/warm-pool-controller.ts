/**
 * SandboxWarmPool controller (docs/extensions.md "Warm pool": the newer upstream's expectations, readiness grace,
 * refill pacing): keeps `spec.replicas` warm, unclaimed Sandboxes built from the pool's template. Counts come from
 * PoolMembership (maintained from informer events), so a steady-state pass is O(1): it touches members only to replace
 * drifted or stuck ones, or to scale down.
 */
import { CocoonAnnotationKeys } from '../../api/keys.js';
import { EXTENSIONS_GROUP, fnv1a32, LabelKeys, type Sandbox, type SandboxWarmPoolStatus } from '../../api/index.js';
import {
  controllerOf,
  controllerRef,
  isAlreadyExists,
  isConflict,
  isNotFound,
  keyOf,
  mergePatch,
  Sandboxes,
  SandboxTemplates,
  SandboxWarmPools,
  type Informer,
  type Manager,
  type Predicate,
  type ReconcileRequest,
  type ReconcileResult,
} from '../../kube/index.js';
import type { Logger } from '../../log/logger.js';
import { registerController, type ControllerContext } from '../build.js';
import type { OperatorConfig } from '../options.js';
import { foregroundOf } from '../foreground.js';
import { blueprintHash, matchesTemplate } from './blueprint.js';
import { extensionMetrics, type ExtensionMetrics } from './metrics.js';
import { memberOf, PoolMembership, poolHash } from './pool-members.js';
import {
  operatorEventRecorder,
  type EventRecorder,
  isSandboxReady,
  newest,
  type PoolObj,
  type SandboxObj,
  type TemplateObj,
} from './support.js';
import { buildWarmMember } from './warm-member.js';
import { RefillPolicy } from './warm-pool-refill.js';

export { buildWarmMember } from './warm-member.js';

export const POOL_BY_TEMPLATE_INDEX = 'ext:pool-by-template';
const ORPHAN_INDEX = 'ext:warm-orphans';
/** Re-check while expectations are pending, in case a watch event is lost. */
const EXPECTATIONS_RECHECK_MS = 30_000;
/** A member changed under a delete (409): the pass looks again this soon, whether or not the change wakes it. */
const CHANGED_MEMBER_RECHECK_MS = 200;

/** A pass's deletes: issued (or gone already), and refused because the member changed since the cache's view. */
interface PassDeletes {
  removed: Set<string>;
  changed: Set<string>;
}

export interface WarmPoolDeps {
  manager: Manager;
  config: OperatorConfig;
  log: Logger;
  pools: Informer<PoolObj>;
  sandboxes: Informer<SandboxObj>;
  templates: Informer<TemplateObj>;
}

/** Enqueue the pool when anything its accounting or decisions depend on changed (docs/extensions.md "Warm pool"). */
export const memberChanged: Predicate<SandboxObj> = (oldSb, newSb) => {
  if (!oldSb) return true;
  const a = oldSb.metadata;
  const b = newSb.metadata;
  if (JSON.stringify(a.labels ?? {}) !== JSON.stringify(b.labels ?? {})) return true;
  const ra = controllerOf(oldSb);
  const rb = controllerOf(newSb);
  if (ra?.uid !== rb?.uid) return true;
  if (!a.deletionTimestamp !== !b.deletionTimestamp) return true;
  if (a.generation !== b.generation) return true;
  return isSandboxReady(oldSb) !== isSandboxReady(newSb);
};

function isUnschedulable(sb: Sandbox): boolean {
  const conds = sb.status?.conditions ?? [];
  if (conds.some((c) => c.type === 'PodScheduled' && c.status === 'False')) return true;
  const ready = conds.find((c) => c.type === 'Ready');
  return !!ready && ready.status !== 'True' && /unschedulable/i.test(`${ready.reason} ${ready.message}`);
}

export class WarmPoolReconciler {
  readonly membership = new PoolMembership();
  private readonly metrics: ExtensionMetrics;
  private readonly events: EventRecorder;
  private readonly refill: RefillPolicy;
  private readonly lastStatus = new Map<string, PoolObj>();
  private readonly holding = new Map<string, boolean>();
  private readonly hashCache = new WeakMap<TemplateObj, string>();

  constructor(private readonly d: WarmPoolDeps) {
    this.metrics = extensionMetrics(d.manager.registry);
    this.events = operatorEventRecorder(d.manager.client, d.log, d.manager.registry);
    this.refill = new RefillPolicy(d.config.warmPoolMaxRefillRate, foregroundOf(d.manager));
    d.sandboxes.addHandler({
      onAdd: (sb) => this.membership.observe(undefined, sb),
      onUpdate: (o, n) => this.membership.observe(o, n),
      onDelete: (sb) => this.membership.observe(sb, undefined),
    });
    d.sandboxes.addIndex(ORPHAN_INDEX, (sb) => {
      const h = sb.metadata.labels?.[LabelKeys.warmPoolSandbox];
      return h && !controllerOf(sb) && !sb.metadata.deletionTimestamp ? [`${sb.metadata.namespace}/${h}`] : [];
    });
    d.pools.addHandler({ onDelete: (p) => this.forget(p) });
  }

  private forget(pool: PoolObj): void {
    const uid = pool.metadata.uid ?? '';
    this.membership.forgetPool(uid);
    this.refill.forget(uid);
    this.lastStatus.delete(uid);
    this.holding.delete(uid);
  }

  private templateHash(t: TemplateObj): string {
    let h = this.hashCache.get(t);
    if (h === undefined) this.hashCache.set(t, (h = blueprintHash(t)));
    return h;
  }

  async reconcile(req: ReconcileRequest): Promise<ReconcileResult | void> {
    const { config, sandboxes, templates } = this.d;
    const pool = this.d.pools.get(req.key);
    if (!pool || pool.metadata.deletionTimestamp) return;
    // Filled by the nodes (sandbox-apiserver's warm-pool driver, the aggregated layout), which alone writes its
    // status: two writers that disagree was a gap of the reference system.
    if (pool.metadata.annotations?.[CocoonAnnotationKeys.servedBy] === 'sandbox-apiserver') return;
    const uid = pool.metadata.uid!;
    const ns = pool.metadata.namespace!;
    const stats = this.membership.get(uid);
    let requeueMs: number | undefined;
    const requeue = (ms: number) => (requeueMs = requeueMs === undefined ? ms : Math.min(requeueMs, ms));
    const removed = new Set<string>();
    const dels: PassDeletes = { removed, changed: new Set() };
    let refillPending = false;

    if (!config.warmPoolDisableCrManagement) {
      const tplName = pool.spec.sandboxTemplateRef.name;
      const template = templates.getByName(ns, tplName);
      const bpHash = template ? this.templateHash(template) : undefined;
      const freshGen = template ? `${fnv1a32(tplName)}|${bpHash}` : undefined;
      const recreate = pool.spec.updateStrategy?.type === 'Recreate';

      // Orphans carrying this pool's label: delete if stale, else adopt. Stale (docs/extensions.md "Warm pool"):
      // made for another template name (its ref-hash label), else a spec that differs; so an orphan of a
      // spec-identical template the pool no longer uses is replaced, not adopted under the old template's hash (and
      // its NetworkPolicy's selection).
      const refHash = fnv1a32(tplName);
      for (const sb of sandboxes.byIndex(ORPHAN_INDEX, `${ns}/${poolHash(pool.metadata.name!)}`)) {
        const stale =
          template &&
          (sb.metadata.labels?.[LabelKeys.sandboxTemplateRefHash] !== refHash || !matchesTemplate(sb, template));
        if (stale) await this.deleteMember(uid, sb, dels);
        else await this.adoptOrphan(pool, sb);
      }

      // Drift: only members whose generation key differs from the template's are examined.
      if (template && recreate) {
        for (const [gen, names] of [...stats.byGeneration]) {
          if (gen === freshGen) continue;
          const sameRef = gen.startsWith(`${fnv1a32(tplName)}|`);
          let verdict: boolean | undefined;
          for (const name of [...names]) {
            const sb = sandboxes.getByName(ns, name);
            if (!sb) continue;
            verdict ??= !sameRef || !matchesTemplate(sb, template);
            if (verdict) await this.deleteMember(uid, sb, dels);
          }
        }
      }

      // Back-fill launch-type on owned members (full update, as upstream).
      for (const name of [...stats.unlabelled]) {
        const sb = sandboxes.getByName(ns, name);
        if (sb) await this.updateLabels(sb, { [LabelKeys.launchType]: 'warm' });
      }

      // Readiness grace: stuck members are replaced, unschedulable ones held (replacements would be too).
      const now = Date.now();
      let held = 0;
      for (const name of [...stats.notReady]) {
        const sb = sandboxes.getByName(ns, name);
        if (!sb || removed.has(name)) continue;
        const deadline = Date.parse(sb.metadata.creationTimestamp ?? '') + config.warmPoolReadinessGraceMs;
        if (!Number.isFinite(deadline) || now < deadline) {
          if (Number.isFinite(deadline)) requeue(deadline - now + 10);
          continue;
        }
        if (isUnschedulable(sb)) held++;
        else await this.deleteMember(uid, sb, dels);
      }
      this.reportProgress(pool, held, stats.notReady.size, config.warmPoolReadinessGraceMs);
      if (held) requeue(60_000);

      const desired = pool.spec.replicas ?? 1;
      const current = stats.members.size - [...removed].filter((n) => stats.members.has(n)).length;
      const refillWait = this.refill.wait(uid, current, desired);
      // A member that changed under our delete may be a claim's by now: no counting on it until the cache shows it.
      if (dels.changed.size) requeue(CHANGED_MEMBER_RECHECK_MS);
      else if (!this.membership.satisfied(uid)) requeue(EXPECTATIONS_RECHECK_MS);
      else if (refillWait > 0) {
        refillPending = true;
        requeue(refillWait);
      } else if (current < desired && template && bpHash) {
        const want = Math.min(desired - current, config.warmPoolMaxBatchSize);
        const { granted, retryMs } = this.refill.take(uid, want);
        // A refill that started while no claim was arriving stops between waves when claims start to arrive.
        const yieldToClaims = current * 2 >= desired && !this.refill.claimsArriving;
        if (granted > 0 && !(await this.createMembers(pool, template, bpHash, granted, yieldToClaims))) requeue(1);
        if (retryMs > 0) requeue(retryMs);
      } else if (current > desired) {
        const victims = [...stats.members]
          .filter((n) => !removed.has(n))
          .map((n) => sandboxes.getByName(ns, n))
          .filter((sb): sb is SandboxObj => !!sb)
          .sort((a, b) => {
            const ra = isSandboxReady(a) ? 1 : 0;
            const rb = isSandboxReady(b) ? 1 : 0;
            if (ra !== rb) return ra - rb;
            return (b.metadata.creationTimestamp ?? '').localeCompare(a.metadata.creationTimestamp ?? '');
          })
          .slice(0, Math.min(current - desired, config.warmPoolMaxBatchSize));
        await this.inWaves(victims, (sb) => this.deleteMember(uid, sb, dels));
        if (dels.changed.size) requeue(CHANGED_MEMBER_RECHECK_MS);
      }
    }

    // While a refill waits, its pass will write the status: no pool write lands in the adopting claim's window.
    if (refillPending) return { requeueAfterMs: requeueMs ?? 1 };
    const status = {
      replicas: config.warmPoolDisableCrManagement ? this.countAll(pool) : stats.members.size,
      readyReplicas: stats.ready.size,
      selector: `${LabelKeys.warmPoolSandbox}=${poolHash(pool.metadata.name!)}`,
      observedGeneration: pool.metadata.generation ?? 0,
    };
    const statusWait = await this.writeStatus(pool, status);
    if (statusWait > 0) requeue(statusWait);
    return requeueMs === undefined ? undefined : { requeueAfterMs: requeueMs };
  }

  /** Status-only mode counts every labelled member, owned or not (`--sandbox-warm-pool-disable-cr-management`). */
  private countAll(pool: PoolObj): number {
    return (
      this.membership.get(pool.metadata.uid!).members.size +
      this.d.sandboxes.countByIndex(ORPHAN_INDEX, `${pool.metadata.namespace}/${poolHash(pool.metadata.name!)}`)
    );
  }

  private reportProgress(pool: PoolObj, held: number, notReady: number, graceMs: number): void {
    const uid = pool.metadata.uid!;
    const was = this.holding.get(uid) ?? false;
    if (held > 0 && !was) {
      this.events.record(pool, SandboxWarmPools, {
        type: 'Warning',
        reason: 'WarmPoolNotProgressing',
        action: 'Hold',
        note: `${held}/${notReady} sandboxes are unschedulable past the ${Math.round(graceMs / 1000)}s readiness grace period; holding them instead of replacing (replacements would be equally unschedulable)`,
      });
    } else if (held === 0 && was) {
      this.events.record(pool, SandboxWarmPools, {
        type: 'Normal',
        reason: 'WarmPoolProgressing',
        action: 'Resume',
        note: 'Warm pool members are schedulable again',
      });
    }
    this.holding.set(uid, held > 0);
  }

  /** Patch the status if it changed, unless one was written moments ago: then the ms to wait (0 when written). */
  private async writeStatus(pool: PoolObj, want: Required<SandboxWarmPoolStatus>): Promise<number> {
    const seen = newest(pool, this.lastStatus.get(pool.metadata.uid!)) ?? pool;
    const have = seen.status ?? {};
    const patch = mergePatch(
      {
        replicas: have.replicas,
        readyReplicas: have.readyReplicas,
        selector: have.selector,
        observedGeneration: have.observedGeneration,
      },
      want,
    );
    if (patch === undefined) return 0;
    const desired = pool.spec.replicas ?? 1;
    const wait = this.refill.statusDelay(
      pool.metadata.uid!,
      want.replicas === desired && want.readyReplicas === desired,
    );
    if (wait > 0) return wait;
    const out = await this.d.manager.client.patch<PoolObj>(
      SandboxWarmPools,
      pool.metadata.namespace,
      pool.metadata.name!,
      { status: patch },
      'merge',
      {
        subresource: 'status',
      },
    );
    this.lastStatus.set(pool.metadata.uid!, out);
    this.refill.statusWritten(pool.metadata.uid!);
    return 0;
  }

  /**
   * Create `n` members in slow-start waves (1, 2, 4, ...). With `yieldToClaims`, stop before a wave when claims
   * have started arriving; returns false when it stopped early (the rest is the next pass's).
   */
  private async createMembers(
    pool: PoolObj,
    template: TemplateObj,
    bpHash: string,
    n: number,
    yieldToClaims: boolean,
  ): Promise<boolean> {
    const uid = pool.metadata.uid!;
    this.membership.expect(uid, 'adds', n);
    let left = n;
    for (let wave = 1; left > 0; wave *= 2) {
      if (yieldToClaims && wave > 1 && this.refill.claimsArriving) {
        this.membership.lower(uid, 'adds', left);
        return false;
      }
      const size = Math.min(wave, left);
      left -= size;
      const results = await Promise.allSettled(
        Array.from({ length: size }, () => this.createMember(pool, template, bpHash)),
      );
      const failed = results.filter((r) => r.status === 'rejected');
      this.metrics.warmCreated.inc(
        { namespace: pool.metadata.namespace, warmpool_name: pool.metadata.name },
        size - failed.length,
      );
      if (failed.length) {
        this.membership.lower(uid, 'adds', failed.length + left);
        throw (failed[0] as PromiseRejectedResult).reason;
      }
    }
    return true;
  }

  /** One member under a name of our own; a name already taken (one in 27^5 per existing member) gets another. */
  private async createMember(pool: PoolObj, template: TemplateObj, bpHash: string): Promise<void> {
    const eviction = this.d.config.enableWarmPoolEviction;
    for (let attempt = 1; ; attempt++) {
      try {
        await this.d.manager.client.create(Sandboxes, buildWarmMember(pool, template, bpHash, eviction) as SandboxObj);
        return;
      } catch (err) {
        if (!isAlreadyExists(err) || attempt >= 3) throw err;
      }
    }
  }

  private async inWaves<T>(items: T[], fn: (item: T) => Promise<void>): Promise<void> {
    let i = 0;
    for (let wave = 1; i < items.length; wave *= 2) {
      const batch = items.slice(i, i + wave);
      i += batch.length;
      await Promise.all(batch.map(fn));
    }
  }

  /**
   * Delete a member as the cache shows it: guarded by its uid and resourceVersion, so a member that changed since
   * (above all, one a claim has just adopted, which the cache may not show yet; adopted Sandboxes are not the
   * pool's, docs/extensions.md "Warm pool") is left alone, and the next pass decides from the newer view.
   */
  private async deleteMember(poolUid: string, sb: SandboxObj, dels: PassDeletes): Promise<void> {
    const name = sb.metadata.name!;
    if (dels.removed.has(name) || dels.changed.has(name)) return;
    dels.removed.add(name);
    const counted = memberOf(sb) === poolUid;
    if (counted) this.membership.expect(poolUid, 'dels', 1);
    try {
      await this.d.manager.client.delete(Sandboxes, sb.metadata.namespace, name, {
        preconditions: { uid: sb.metadata.uid, resourceVersion: sb.metadata.resourceVersion },
      });
    } catch (err) {
      // Not deleted by us: no delete event will lower the expectation.
      if (counted) this.membership.lower(poolUid, 'dels');
      if (isConflict(err)) {
        // Still there (or no longer ours): it counts as it is until the cache shows otherwise.
        dels.removed.delete(name);
        dels.changed.add(name);
      } else if (!isNotFound(err)) throw err;
    }
  }

  private async adoptOrphan(pool: PoolObj, sb: SandboxObj): Promise<void> {
    const next = structuredClone(sb);
    next.metadata.ownerReferences = [
      ...(sb.metadata.ownerReferences ?? []).filter((r) => !r.controller),
      controllerRef(pool, SandboxWarmPools),
    ];
    next.metadata.labels = { ...next.metadata.labels, [LabelKeys.launchType]: 'warm' };
    try {
      await this.d.manager.client.update(Sandboxes, next);
    } catch (err) {
      if (!isConflict(err) && !isNotFound(err)) throw err;
    }
  }

  private async updateLabels(sb: SandboxObj, labels: Record<string, string>): Promise<void> {
    const next = structuredClone(sb);
    next.metadata.labels = { ...next.metadata.labels, ...labels };
    try {
      await this.d.manager.client.update(Sandboxes, next);
    } catch (err) {
      if (!isConflict(err) && !isNotFound(err)) throw err;
    }
  }
}

export function registerWarmPoolController({ manager, config, log }: ControllerContext): WarmPoolReconciler {
  const scope = { namespace: config.watchNamespace };
  const pools = manager.informer<PoolObj>(SandboxWarmPools, scope);
  const sandboxes = manager.informer<SandboxObj>(Sandboxes, scope);
  const templates = manager.informer<TemplateObj>(SandboxTemplates, scope);
  pools.addIndex(POOL_BY_TEMPLATE_INDEX, (p) => [`${p.metadata.namespace}/${p.spec.sandboxTemplateRef.name}`]);
  const r = new WarmPoolReconciler({ manager, config, log, pools, sandboxes, templates });
  manager
    .controller({ name: 'sandboxwarmpool', workers: config.warmPoolWorkers, reconcile: (req) => r.reconcile(req) })
    .for(pools)
    .owns(sandboxes, 'SandboxWarmPool', EXTENSIONS_GROUP, memberChanged)
    .watches(templates, (t) => pools.byIndex(POOL_BY_TEMPLATE_INDEX, keyOf(t)).map(keyOf))
    .watches(sandboxes, (sb) => {
      // Orphans with a pool label: wake the pool whose hash matches (rare; linear in pools of the namespace).
      const h = sb.metadata.labels?.[LabelKeys.warmPoolSandbox];
      if (!h || controllerOf(sb)) return [];
      return pools
        .list()
        .filter((p) => p.metadata.namespace === sb.metadata.namespace && poolHash(p.metadata.name!) === h)
        .map(keyOf);
    });
  return r;
}

registerController('sandboxwarmpool', true, (op) => void registerWarmPoolController(op));
