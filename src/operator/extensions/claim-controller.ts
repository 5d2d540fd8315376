/**
 * SandboxClaim controller (spec §9) with the L1 fast path.
 *
 * Fast path, per claim, in one reconcile and three API writes (none of them a read):
 *   1. take a warm, Ready candidate of the claim's pool from the in-memory queue (candidates.ts);
 *   2. adopt it with ONE merge patch carrying the candidate's `metadata.resourceVersion` (the apiserver rejects it
 *      with 409 if anything changed the Sandbox since we saw it, in particular another adoption). The patch moves
 *      the controller ownerReference to the claim and sets `claim-uid`, so the binding lives on the Sandbox.
 *      Conflict -> the next candidate at once (no requeue, no backoff);
 *   3. merge-patch the claim's status from the patch response (the Sandbox was Ready, so the claim is Ready);
 *   4. off the critical path, merge-patch the claim's annotations (`sandbox-name`, `controller-first-observed-at`,
 *      `sandbox-template-ref`).
 * The upstream's first write (a resourceVersion-guarded claim update recording `sandbox-name` before the Sandbox
 * patch) is not needed: exclusivity comes from the guarded Sandbox patch alone, and a claim finds its Sandbox again
 * by ownership — in this process from the patch response, after a restart from the Sandbox informer's
 * controller-UID index (filled by a fresh LIST before any reconcile runs). A claim therefore never adopts a second
 * Sandbox: every path that could create or adopt one first asks "does a Sandbox already name this claim its
 * controller?". A write whose outcome is unknown (transport error) is resolved by a GET before anything else.
 */
import {
  AnnotationKeys,
  EXTENSIONS_GROUP,
  fnv1a32,
  HUB_VERSION,
  LabelKeys,
  claimV1alpha1Intent,
  resolveShadowPoolTemplate,
  type PodMetadata,
  type Sandbox,
  type SandboxClaimStatus,
} from '../../api/index.js';
import { SandboxError } from '../../errors.js';
import {
  controllerOf,
  controllerRef,
  isAlreadyExists,
  isConflict,
  isControlledBy,
  isNotFound,
  keyOf,
  mergePatch,
  NetworkPolicies,
  Sandboxes,
  SandboxClaims,
  SandboxTemplates,
  SandboxWarmPools,
  type Informer,
  type KubeObject,
  type Manager,
  type ReconcileRequest,
  type ReconcileResult,
} from '../../kube/index.js';
import type { Logger } from '../../log/logger.js';
import { registerController } from '../build.js';
import type { OperatorConfig } from '../options.js';
import { sandboxSpecFromTemplate } from './blueprint.js';
import { CandidateQueues } from './candidates.js';
import {
  claimStatusFor,
  ClaimReasons,
  findCondition,
  isReady,
  sameStatus,
  timeLeft,
  type ClaimOutcome,
} from './claim-status.js';
import {
  ClaimInputError,
  injectEnv,
  loadAllowedLabelDomains,
  mergePodMetadata,
  mergeVolumeClaimTemplates,
  validateAdditionalPodMetadata,
} from './injection.js';
import { extensionMetrics, normalizeCreatedBy, type ExtensionMetrics } from './metrics.js';
import {
  EventRecorder,
  isSandboxReady,
  newest,
  type ClaimObj,
  type PoolObj,
  type SandboxObj,
  type TemplateObj,
} from './support.js';

export const SANDBOX_BY_CONTROLLER_INDEX = 'ext:sandbox-by-controller-uid';
const CLAIM_BY_POOL_INDEX = 'ext:claim-by-pool';
const HUB_API_VERSION = `${EXTENSIONS_GROUP}/${HUB_VERSION}`;
/** Adoption attempts per pass before falling back to a cold start. */
const MAX_ADOPTION_ATTEMPTS = 16;
const NOT_FOUND_REQUEUE_MS = 60_000;
/**
 * Without leader election, how long a restarted operator leaves claims it found at startup (and that no Sandbox
 * names as controller) alone before binding them: a write the previous process sent just before it died may still
 * commit for a moment after (seen above 1 s on an overloaded machine). With leader election the lease hand-over
 * (leaseDuration, 15 s) is that wait.
 */
export const PREDECESSOR_SETTLE_MS = 5_000;
const CREATE_PENDING_REQUEUE_MS = 200;

/** RFC3339 with nanoseconds and Go's trailing-zero trimming; the sub-millisecond part comes from hrtime. */
export function rfc3339Nano(): string {
  const ms = Date.now();
  const sub = Number(process.hrtime.bigint() % 1_000_000n) || 1;
  const base = new Date(ms).toISOString().slice(0, 19);
  const frac = `${String(ms % 1000).padStart(3, '0')}${String(sub).padStart(6, '0')}`.replace(/0+$/, '');
  return `${base}.${frac}Z`;
}

/** The pool a warm Sandbox may be adopted from, or undefined when it is not adoptable (spec §9.3). */
export function adoptablePool(sb: SandboxObj): string | undefined {
  if (sb.metadata.deletionTimestamp) return undefined;
  const l = sb.metadata.labels;
  if (!l?.[LabelKeys.warmPoolSandbox] || !l[LabelKeys.sandboxTemplateRefHash]) return undefined;
  const ref = controllerOf(sb);
  if (!ref || ref.kind !== 'SandboxWarmPool' || ref.apiVersion !== HUB_API_VERSION) return undefined;
  return ref.name;
}

/** Not now, and nothing to report: requeue without writing status. */
class Deferred extends SandboxError {
  constructor(readonly requeueMs: number) {
    super('claim.deferred', 'deferred');
  }
}

class Outcome extends SandboxError {
  constructor(
    readonly reason: string,
    message: string,
    readonly requeueMs: number | undefined,
    readonly suppressed: boolean,
  ) {
    super(`claim.${reason}`, message);
  }
}

interface Resolved {
  sandbox: SandboxObj;
  template: string | undefined;
}

export interface ClaimDeps {
  manager: Manager;
  config: OperatorConfig;
  log: Logger;
  claims: Informer<ClaimObj>;
  sandboxes: Informer<SandboxObj>;
  pools: Informer<PoolObj>;
  templates: Informer<TemplateObj>;
  policies: Informer<KubeObject>;
}

export class ClaimReconciler {
  readonly candidates = new CandidateQueues();
  private readonly firstObserved = new Map<string, string>();
  /** claim UID -> the Sandbox we bound it to (our write's response), until the cache catches up. */
  private readonly bindings = new Map<string, SandboxObj>();
  /** claim UID -> our last write's response. */
  private readonly written = new Map<string, ClaimObj>();
  /** claim UID -> a candidate whose adoption outcome is unknown (transport error); checked with a GET first. */
  private readonly uncertain = new Map<string, string>();
  private readonly allowedLabelDomains = loadAllowedLabelDomains();
  private readonly metrics: ExtensionMetrics;
  private readonly events: EventRecorder;
  private fence: Promise<void> | undefined;
  /** Events of the current pass, sent after the status write so they never compete with it. */
  private readonly deferredEvents = new Map<string, Array<() => void>>();
  /** Claims that existed before this process synced: a dead predecessor may have been binding them. */
  private readonly preexisting = new Set<string>();
  private readonly startedAt = Date.now();

  constructor(private readonly d: ClaimDeps) {
    this.metrics = extensionMetrics(d.manager.registry);
    this.events = new EventRecorder(d.manager.client, d.log);
    d.sandboxes.addIndex(SANDBOX_BY_CONTROLLER_INDEX, (sb) => {
      const ref = controllerOf(sb);
      return ref?.kind === SandboxClaims.kind ? [ref.uid] : [];
    });
    d.claims.addIndex(CLAIM_BY_POOL_INDEX, (c) => [`${c.metadata.namespace}/${c.spec.warmPoolRef.name}`]);
    const offer = (sb: SandboxObj) =>
      this.candidates.observe(
        sb.metadata.namespace!,
        sb.metadata.name!,
        adoptablePool(sb),
        sb.status?.nodeName ?? '',
        isSandboxReady(sb),
      );
    d.sandboxes.addHandler({
      onAdd: offer,
      onUpdate: (_o, n) => offer(n),
      onDelete: (sb) => this.candidates.forget(sb.metadata.namespace!, sb.metadata.name!),
    });
    const observeClaim = (c: ClaimObj) => {
      const uid = c.metadata.uid!;
      if (!d.claims.hasSynced && !d.config.leaderElect && !c.status?.sandbox?.name) this.preexisting.add(uid);
      if (!this.firstObserved.has(uid) && !c.metadata.annotations?.[AnnotationKeys.controllerFirstObservedAt])
        this.firstObserved.set(uid, rfc3339Nano());
    };
    d.claims.addHandler({
      onAdd: observeClaim,
      onUpdate: (_o, n) => observeClaim(n),
      onDelete: (c) => this.forget(c.metadata.uid!),
    });
    d.pools.addHandler({ onDelete: (p) => this.candidates.dropPool(p.metadata.namespace!, p.metadata.name!) });
  }

  private forget(uid: string): void {
    this.firstObserved.delete(uid);
    this.bindings.delete(uid);
    this.written.delete(uid);
    this.uncertain.delete(uid);
    this.preexisting.delete(uid);
  }

  /** Claims of a pool still waiting for a Sandbox (woken when the pool appears or changes). */
  waitingClaims(pool: PoolObj): string[] {
    return this.d.claims
      .byIndex(CLAIM_BY_POOL_INDEX, keyOf(pool))
      .filter((c) => !c.status?.sandbox?.name)
      .map(keyOf);
  }

  /**
   * With leader election, caches synced before this process became leader may lag the previous leader's last
   * writes. One consistent LIST of Sandboxes, before the first pass, closes that gap for the binding lookups.
   */
  private async fenceOnce(): Promise<void> {
    if (!this.d.config.leaderElect) return;
    this.fence ??= (async () => {
      const list = await this.d.manager.client.list<SandboxObj>(Sandboxes, this.d.config.watchNamespace);
      for (const sb of list.items) {
        const ref = controllerOf(sb);
        if (ref?.kind === SandboxClaims.kind) {
          const have = this.bindings.get(ref.uid);
          if (!have || have.metadata.name === sb.metadata.name) this.bindings.set(ref.uid, newest(have, sb) ?? sb);
        }
      }
    })();
    await this.fence;
  }

  async reconcile(req: ReconcileRequest): Promise<ReconcileResult | void> {
    await this.fenceOnce();
    const cached = this.d.claims.get(req.key);
    if (!cached) return;
    const uid = cached.metadata.uid!;
    const claim = newest(cached, this.written.get(uid))!;
    this.deleteLegacyNetworkPolicy(claim);
    if (claim.metadata.deletionTimestamp) return;

    const now = Date.now();
    const tl = timeLeft(claim.spec.lifecycle, claim.status?.conditions, now);
    if (tl.expired) return this.reconcileExpired(claim);

    let outcome: ClaimOutcome;
    let requeueMs = tl.leftMs === undefined ? undefined : Math.max(1, tl.leftMs);
    let failure: unknown;
    let resolved: Resolved | undefined;
    let launched: 'warm' | 'cold' | undefined;
    try {
      validateAdditionalPodMetadata(claim.spec.additionalPodMetadata, this.allowedLabelDomains);
      const r = await this.resolve(claim, (l) => (launched = l));
      resolved = r;
      outcome = { kind: 'sandbox', sandbox: r.sandbox };
    } catch (err) {
      if (err instanceof ClaimInputError)
        outcome = { kind: 'error', reason: err.reason, message: err.message, keepSandboxStatus: true };
      else if (err instanceof Outcome) {
        outcome = { kind: 'error', reason: err.reason, message: err.message, keepSandboxStatus: true };
        if (err.requeueMs !== undefined) requeueMs = Math.min(requeueMs ?? Infinity, err.requeueMs);
        if (!err.suppressed) failure = err;
      } else {
        outcome = {
          kind: 'error',
          reason: ClaimReasons.reconcilerError,
          message: `Error seen: ${(err as Error).message}`,
          keepSandboxStatus: true,
        };
        failure = err;
      }
    }

    const status = claimStatusFor(claim, outcome, new Date().toISOString().replace(/\.\d+Z$/, 'Z'));
    const becameReady = !isReady(claim.status) && isReady(status);
    // Status first (it is what clients wait for), then the annotations.
    let afterStatus: ClaimObj | undefined;
    try {
      afterStatus = await this.writeStatus(claim, status);
    } finally {
      this.flushEvents(uid);
    }
    await this.writeAnnotations(afterStatus ?? claim, resolved);
    if (becameReady && resolved) this.observeLatency(claim, resolved, launched);
    if (failure) throw failure;
    return requeueMs === undefined ? undefined : { requeueAfterMs: requeueMs };
  }

  private observeLatency(claim: ClaimObj, r: Resolved, launched: 'warm' | 'cold' | undefined): void {
    const labels = {
      launch_type: launched ?? r.sandbox.metadata.labels?.[LabelKeys.launchType] ?? 'unknown',
      sandbox_template: r.sandbox.metadata.annotations?.[AnnotationKeys.sandboxTemplateRef] ?? '__unknown__',
      warmpool_name: claim.spec.warmPoolRef.name,
    };
    const now = Date.now();
    const observe = (h: typeof this.metrics.claimStartupLatency, at: string | undefined) => {
      const t = at ? Date.parse(at) : NaN;
      if (Number.isFinite(t) && t <= now) h.observe(labels, now - t);
    };
    const a = claim.metadata.annotations ?? {};
    observe(this.metrics.claimStartupLatency, a[AnnotationKeys.webhookFirstObservedAt]);
    observe(
      this.metrics.claimControllerStartupLatency,
      a[AnnotationKeys.controllerFirstObservedAt] ?? this.firstObserved.get(claim.metadata.uid!),
    );
  }

  private deleteLegacyNetworkPolicy(claim: ClaimObj): void {
    const np = this.d.policies.getByName(claim.metadata.namespace, `${claim.metadata.name}-network-policy`);
    if (!np || !isControlledBy(np, claim) || controllerOf(np)?.kind !== SandboxClaims.kind) return;
    this.d.manager.client
      .delete(NetworkPolicies, np.metadata.namespace, np.metadata.name!, { preconditions: { uid: np.metadata.uid } })
      .catch((err: unknown) => this.d.log.debug({ err }, 'legacy NetworkPolicy not deleted'));
  }

  private defer(claim: ClaimObj, fn: () => void): void {
    const uid = claim.metadata.uid!;
    const list = this.deferredEvents.get(uid);
    if (list) list.push(fn);
    else this.deferredEvents.set(uid, [fn]);
  }

  private flushEvents(uid: string): void {
    const list = this.deferredEvents.get(uid);
    this.deferredEvents.delete(uid);
    for (const fn of list ?? []) fn();
  }

  /** The freshest view of a Sandbox: the cache's or our last write's. */
  private sandboxView(namespace: string, name: string, claimUid: string): SandboxObj | undefined {
    const cached = this.d.sandboxes.getByName(namespace, name);
    const mine = this.bindings.get(claimUid);
    return newest(cached, mine?.metadata.name === name ? mine : undefined);
  }

  /** A Sandbox that already names this claim its controller, if any (spec §9.2 steps 1–3, by ownership). */
  private async boundSandbox(claim: ClaimObj): Promise<SandboxObj | undefined> {
    const ns = claim.metadata.namespace!;
    const uid = claim.metadata.uid!;
    const owned = (sb: SandboxObj | undefined) =>
      sb && !sb.metadata.deletionTimestamp && isControlledBy(sb, claim) ? sb : undefined;
    const pending = this.uncertain.get(uid);
    if (pending !== undefined) {
      let fresh: SandboxObj | undefined;
      try {
        fresh = await this.d.manager.client.get<SandboxObj>(Sandboxes, ns, pending);
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
      this.uncertain.delete(uid);
      if (fresh && isControlledBy(fresh, claim)) this.bindings.set(uid, fresh);
    }
    const statusName = claim.status?.sandbox?.name;
    const byStatus = statusName ? owned(this.sandboxView(ns, statusName, uid)) : undefined;
    if (byStatus) return byStatus;
    const mine = this.bindings.get(uid);
    if (mine) {
      const view = owned(this.sandboxView(ns, mine.metadata.name!, uid));
      if (view) return view;
    }
    const indexed = this.d.sandboxes.byIndex(SANDBOX_BY_CONTROLLER_INDEX, uid).filter((sb) => owned(sb));
    if (indexed.length > 1)
      this.d.log.error({ claim: keyOf(claim), sandboxes: indexed.map(keyOf) }, 'claim controls more than one Sandbox');
    if (indexed.length)
      return indexed.sort((a, b) =>
        (a.metadata.creationTimestamp ?? '').localeCompare(b.metadata.creationTimestamp ?? ''),
      )[0];
    const annotated = claim.metadata.annotations?.[AnnotationKeys.sandboxName];
    if (annotated) {
      const sb = owned(this.sandboxView(ns, annotated, uid));
      if (sb) return sb;
    }
    return undefined;
  }

  /**
   * A claim this process found at startup with no Sandbox naming it controller: after the settle window, one
   * consistent LIST by the `claim-uid` label (which every adoption and cold create sets) decides, so a binding the
   * previous process committed late is found instead of a second Sandbox being bound.
   */
  private async recoverFromPredecessor(claim: ClaimObj): Promise<SandboxObj | undefined> {
    const uid = claim.metadata.uid!;
    if (!this.preexisting.has(uid)) return undefined;
    const wait = this.startedAt + PREDECESSOR_SETTLE_MS - Date.now();
    if (wait > 0) throw new Deferred(wait);
    const list = await this.d.manager.client.list<SandboxObj>(Sandboxes, claim.metadata.namespace, {
      labelSelector: `${LabelKeys.claimUid}=${uid}`,
    });
    this.preexisting.delete(uid);
    const found = list.items.find((sb) => isControlledBy(sb, claim) && !sb.metadata.deletionTimestamp);
    if (found) this.bindings.set(uid, found);
    return found;
  }

  private async resolve(claim: ClaimObj, launched: (l: 'warm' | 'cold') => void): Promise<Resolved> {
    const ns = claim.metadata.namespace!;
    const poolName = claim.spec.warmPoolRef.name;
    const pool = this.d.pools.getByName(ns, poolName);
    const templateName = pool ? pool.spec.sandboxTemplateRef.name : resolveShadowPoolTemplate(poolName);
    const template = templateName ? this.d.templates.getByName(ns, templateName) : undefined;

    const bound = (await this.boundSandbox(claim)) ?? (await this.recoverFromPredecessor(claim));
    if (bound) return { sandbox: await this.syncMetadata(claim, bound, template), template: templateName };

    const sameName = this.sandboxView(ns, claim.metadata.name!, claim.metadata.uid!);
    if (sameName && !sameName.metadata.deletionTimestamp)
      throw new Outcome(
        ClaimReasons.reconcilerError,
        `Error seen: sandbox "${claim.metadata.name}" is not controlled by claim "${claim.metadata.name}". Please use a different claim name or delete the sandbox manually`,
        undefined,
        true,
      );

    if (!pool && templateName === undefined)
      throw new Outcome(
        ClaimReasons.warmPoolNotFound,
        `SandboxWarmPool "${poolName}" not found`,
        NOT_FOUND_REQUEUE_MS,
        true,
      );

    // A v1alpha1 client that asked for `warmpool: none` gets a cold start even from an existing shadow pool (docs/api.md).
    const cold =
      !!claim.spec.env?.length ||
      !!claim.spec.volumeClaimTemplates?.length ||
      claimV1alpha1Intent(claim)?.warmpool === 'none';
    if (pool && !cold) {
      const adopted = await this.adopt(claim, pool, template);
      if (adopted) {
        launched('warm');
        return { sandbox: adopted, template: templateName };
      }
    }
    if (!template)
      throw new Outcome(
        ClaimReasons.templateNotFound,
        `SandboxTemplate "${templateName}" not found`,
        NOT_FOUND_REQUEUE_MS,
        true,
      );
    launched('cold');
    return { sandbox: await this.createCold(claim, template), template: templateName };
  }

  /** The claim-side pod-template metadata (spec §9.2 metadata sync / §9.4). */
  private desiredPodMetadata(claim: ClaimObj, base: PodMetadata | undefined, templateName: string): PodMetadata {
    const system: PodMetadata = {
      labels: { [LabelKeys.claimUid]: claim.metadata.uid!, [LabelKeys.sandboxTemplateRefHash]: fnv1a32(templateName) },
    };
    const createdBy = claim.metadata.labels?.[LabelKeys.createdBy];
    const md = mergePodMetadata(
      { labels: { ...base?.labels, ...system.labels }, annotations: base?.annotations },
      claim.spec.additionalPodMetadata,
    );
    if (createdBy !== undefined) md.labels = { ...md.labels, [LabelKeys.createdBy]: createdBy };
    else if (md.labels) delete md.labels[LabelKeys.createdBy];
    return md;
  }

  private async adopt(
    claim: ClaimObj,
    pool: PoolObj,
    template: TemplateObj | undefined,
  ): Promise<SandboxObj | undefined> {
    const ns = claim.metadata.namespace!;
    const uid = claim.metadata.uid!;
    const client = this.d.manager.client;
    for (let attempt = 0; attempt < MAX_ADOPTION_ATTEMPTS; attempt++) {
      const pick = this.candidates.take(ns, pool.metadata.name!);
      if (!pick) return undefined;
      const sb = this.d.sandboxes.getByName(ns, pick.name);
      if (!sb || adoptablePool(sb) !== pool.metadata.name) {
        this.candidates.settle(ns, pick.name);
        continue;
      }
      const patch = this.adoptionPatch(claim, sb, template);
      try {
        const out = await client.patch<SandboxObj>(Sandboxes, ns, pick.name, patch, 'merge');
        this.bindings.set(uid, out);
        this.candidates.settle(ns, pick.name);
        this.defer(claim, () =>
          this.events.record(claim, SandboxClaims, {
            type: 'Normal',
            reason: 'SandboxAdopted',
            action: 'Adoption',
            note: `Adopted warm pool Sandbox "${pick.name}"`,
          }),
        );
        this.metrics.claimCreation.inc({
          namespace: ns,
          sandbox_template: sb.metadata.annotations?.[AnnotationKeys.sandboxTemplateRef] ?? '__unknown__',
          launch_type: 'warm',
          warmpool_name: pool.metadata.name,
          pod_condition: isSandboxReady(sb) ? 'ready' : 'not_ready',
          created_by: normalizeCreatedBy(claim.metadata.labels?.[LabelKeys.createdBy]),
        });
        return out;
      } catch (err) {
        this.candidates.settle(ns, pick.name);
        if (isConflict(err)) {
          // Changed since we saw it (maybe adopted elsewhere): offer the cache's view again and move on at once.
          const latest = this.d.sandboxes.getByName(ns, pick.name);
          if (latest)
            this.candidates.observe(
              ns,
              pick.name,
              adoptablePool(latest),
              latest.status?.nodeName ?? '',
              isSandboxReady(latest),
            );
          continue;
        }
        if (isNotFound(err)) continue;
        // Unknown outcome: the next pass asks the apiserver before adopting anything else.
        this.uncertain.set(uid, pick.name);
        throw err;
      }
    }
    return undefined;
  }

  private adoptionPatch(claim: ClaimObj, sb: SandboxObj, template: TemplateObj | undefined): unknown {
    const l = sb.metadata.labels ?? {};
    const templateName = template?.metadata.name ?? sb.metadata.annotations?.[AnnotationKeys.sandboxTemplateRef] ?? '';
    const createdBy = claim.metadata.labels?.[LabelKeys.createdBy];
    let base: PodMetadata | undefined;
    if (template) base = template.spec.podTemplate.metadata;
    else {
      base = structuredClone(sb.spec.podTemplate.metadata ?? {});
      if (base.annotations?.[AnnotationKeys.safeToEvict] === 'true')
        delete base.annotations[AnnotationKeys.safeToEvict];
      for (const k of [LabelKeys.warmPoolSandbox, LabelKeys.sandboxTemplateHash, LabelKeys.sandboxPodTemplateHash])
        delete base.labels?.[k];
    }
    const ptMetadata = this.desiredPodMetadata(claim, base, templateName);
    const keptRefHash = l[LabelKeys.sandboxTemplateRefHash];
    if (!template && keptRefHash)
      ptMetadata.labels = { ...ptMetadata.labels, [LabelKeys.sandboxTemplateRefHash]: keptRefHash };
    const trace = claim.metadata.annotations?.[AnnotationKeys.traceContext];
    return {
      metadata: {
        resourceVersion: sb.metadata.resourceVersion,
        labels: {
          [LabelKeys.warmPoolSandbox]: null,
          [LabelKeys.sandboxTemplateHash]: null,
          [LabelKeys.sandboxPodTemplateHash]: null,
          [LabelKeys.launchType]: 'warm',
          [LabelKeys.claimUid]: claim.metadata.uid,
          [LabelKeys.sandboxTemplateRefHash]: l[LabelKeys.sandboxTemplateRefHash] ?? fnv1a32(templateName),
          [LabelKeys.createdBy]: createdBy ?? null,
        },
        ownerReferences: [controllerRef(claim, SandboxClaims)],
        annotations: {
          [AnnotationKeys.podName]: sb.metadata.name,
          ...(trace ? { [AnnotationKeys.traceContext]: trace } : {}),
        },
      },
      spec: { podTemplate: { metadata: mergePatch(sb.spec.podTemplate.metadata ?? {}, ptMetadata) ?? {} } },
    };
  }

  private async createCold(claim: ClaimObj, template: TemplateObj): Promise<SandboxObj> {
    const ns = claim.metadata.namespace!;
    const templateName = template.metadata.name!;
    const spec = sandboxSpecFromTemplate(template);
    const vcts = mergeVolumeClaimTemplates(
      template.spec.volumeClaimTemplates,
      claim.spec.volumeClaimTemplates,
      template.spec.volumeClaimTemplatesPolicy,
    );
    const podSpec = injectEnv(spec.podTemplate.spec, claim.spec.env, template.spec.envVarsInjectionPolicy);
    const createdBy = claim.metadata.labels?.[LabelKeys.createdBy];
    const trace = claim.metadata.annotations?.[AnnotationKeys.traceContext];
    const body: Sandbox = {
      apiVersion: `${Sandboxes.group}/${Sandboxes.version}`,
      kind: Sandboxes.kind,
      metadata: {
        name: claim.metadata.name,
        namespace: ns,
        labels: {
          [LabelKeys.claimUid]: claim.metadata.uid!,
          [LabelKeys.launchType]: 'cold',
          [LabelKeys.sandboxTemplateRefHash]: fnv1a32(templateName),
          ...(createdBy !== undefined ? { [LabelKeys.createdBy]: createdBy } : {}),
        },
        annotations: {
          [AnnotationKeys.sandboxTemplateRef]: templateName,
          ...(trace ? { [AnnotationKeys.traceContext]: trace } : {}),
        },
        ownerReferences: [controllerRef(claim, SandboxClaims)],
      },
      spec: {
        ...spec,
        podTemplate: {
          metadata: this.desiredPodMetadata(claim, spec.podTemplate.metadata, templateName),
          spec: podSpec,
        },
        ...(vcts ? { volumeClaimTemplates: vcts } : {}),
      },
    };
    if (!vcts) delete body.spec.volumeClaimTemplates;
    let out: SandboxObj;
    try {
      out = await this.d.manager.client.create<SandboxObj>(Sandboxes, body as SandboxObj);
    } catch (err) {
      if (isAlreadyExists(err))
        throw new Outcome(
          ClaimReasons.createPending,
          'Sandbox already created; waiting for cache to converge',
          CREATE_PENDING_REQUEUE_MS,
          true,
        );
      throw new SandboxError('claim.create', `sandbox create error: ${(err as Error).message}`, { cause: err });
    }
    this.bindings.set(claim.metadata.uid!, out);
    this.defer(claim, () =>
      this.events.record(claim, SandboxClaims, {
        type: 'Normal',
        reason: 'SandboxProvisioned',
        action: 'Provisioning',
        note: `Created Sandbox "${out.metadata.name}"`,
      }),
    );
    this.metrics.claimCreation.inc({
      namespace: ns,
      sandbox_template: templateName,
      launch_type: 'cold',
      warmpool_name: claim.spec.warmPoolRef.name,
      pod_condition: 'not_ready',
      created_by: normalizeCreatedBy(createdBy),
    });
    return out;
  }

  /** Later edits of template pod metadata or claim metadata reach the bound Sandbox (spec §9.2). */
  private async syncMetadata(claim: ClaimObj, sb: SandboxObj, template: TemplateObj | undefined): Promise<SandboxObj> {
    const labels = sb.metadata.labels ?? {};
    const templateName = template?.metadata.name;
    const want: Record<string, string | null> = {};
    if (!labels[LabelKeys.launchType]) {
      const warm =
        claim.metadata.annotations?.[AnnotationKeys.sandboxName] === sb.metadata.name ||
        sb.metadata.name !== claim.metadata.name;
      want[LabelKeys.launchType] = warm ? 'warm' : 'cold';
    }
    let ptPatch: unknown;
    if (templateName) {
      const refHash = fnv1a32(templateName);
      if (labels[LabelKeys.sandboxTemplateRefHash] !== refHash) want[LabelKeys.sandboxTemplateRefHash] = refHash;
      const createdBy = claim.metadata.labels?.[LabelKeys.createdBy];
      if ((labels[LabelKeys.createdBy] ?? null) !== (createdBy ?? null)) want[LabelKeys.createdBy] = createdBy ?? null;
      const base = template.spec.podTemplate.metadata;
      const desired = this.desiredPodMetadata(claim, base, templateName);
      // Keys the Sandbox carries for itself (safe-to-evict from the template only) are left to the comparison.
      ptPatch = mergePatch(sb.spec.podTemplate.metadata ?? {}, desired);
    } else if (claim.spec.additionalPodMetadata) {
      throw new SandboxError(
        'claim.metadata',
        `failed to get template for metadata propagation: SandboxTemplate not found`,
      );
    }
    if (!Object.keys(want).length && ptPatch === undefined) return sb;
    const patch: Record<string, unknown> = {};
    if (Object.keys(want).length) patch.metadata = { labels: want };
    if (ptPatch !== undefined) patch.spec = { podTemplate: { metadata: ptPatch } };
    const out = await this.d.manager.client.patch<SandboxObj>(
      Sandboxes,
      sb.metadata.namespace,
      sb.metadata.name!,
      patch,
      'merge',
    );
    this.bindings.set(claim.metadata.uid!, out);
    return out;
  }

  private async writeStatus(claim: ClaimObj, status: SandboxClaimStatus): Promise<ClaimObj | undefined> {
    if (sameStatus(claim.status, status)) return undefined;
    const patch = mergePatch(claim.status ?? {}, status);
    if (patch === undefined) return undefined;
    const out = await this.d.manager.client.patch<ClaimObj>(
      SandboxClaims,
      claim.metadata.namespace,
      claim.metadata.name!,
      { status: patch },
      'merge',
      {
        subresource: 'status',
      },
    );
    this.written.set(claim.metadata.uid!, out);
    return out;
  }

  /** Persist the observability and binding annotations (one merge patch, only when something is missing). */
  private async writeAnnotations(claim: ClaimObj, resolved: Resolved | undefined): Promise<void> {
    const have = claim.metadata.annotations ?? {};
    const want: Record<string, string | null> = {};
    const first = this.firstObserved.get(claim.metadata.uid!);
    if (!have[AnnotationKeys.controllerFirstObservedAt] && first)
      want[AnnotationKeys.controllerFirstObservedAt] = first;
    if (resolved) {
      const name = resolved.sandbox.metadata.name!;
      if (have[AnnotationKeys.sandboxName] !== name) want[AnnotationKeys.sandboxName] = name;
      if (resolved.template && have[AnnotationKeys.sandboxTemplateRef] !== resolved.template)
        want[AnnotationKeys.sandboxTemplateRef] = resolved.template;
    } else {
      const recorded = have[AnnotationKeys.sandboxName];
      if (recorded && !this.sandboxView(claim.metadata.namespace!, recorded, claim.metadata.uid!))
        want[AnnotationKeys.sandboxName] = null;
    }
    if (!Object.keys(want).length) return;
    const out = await this.d.manager.client.patch<ClaimObj>(
      SandboxClaims,
      claim.metadata.namespace,
      claim.metadata.name!,
      { metadata: { annotations: want } },
      'merge',
    );
    this.written.set(claim.metadata.uid!, out);
    if (first) this.firstObserved.delete(claim.metadata.uid!);
  }

  /** spec §9.1 steps 5–7 and §9.6. */
  private async reconcileExpired(claim: ClaimObj): Promise<ReconcileResult | void> {
    const ns = claim.metadata.namespace!;
    const policy = claim.spec.lifecycle?.shutdownPolicy ?? 'Retain';
    const ready = findCondition(claim.status?.conditions, 'Ready');
    const sbName = claim.status?.sandbox?.name || claim.metadata.name!;
    const sb = this.sandboxView(ns, sbName, claim.metadata.uid!);
    if (ready?.reason !== ClaimReasons.claimExpired) {
      const status = claimStatusFor(
        claim,
        { kind: 'expired', sandbox: sb && isControlledBy(sb, claim) ? sb : undefined },
        new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
      );
      const after = await this.writeStatus(claim, status);
      await this.writeAnnotations(after ?? claim, undefined);
      this.events.record(claim, SandboxClaims, {
        type: 'Normal',
        reason: 'ClaimExpired',
        action: 'Claim Expired',
        note: 'Claim expired',
      });
      return { requeueAfterMs: 1 };
    }
    if (policy === 'Delete' || policy === 'DeleteForeground') {
      this.events.record(claim, SandboxClaims, {
        type: 'Normal',
        reason: 'ClaimExpired',
        action: 'Deleting',
        note: `Deleting Claim (ShutdownPolicy=${policy})`,
      });
      await this.writeAnnotations(claim, undefined);
      try {
        await this.d.manager.client.delete(
          SandboxClaims,
          ns,
          claim.metadata.name!,
          policy === 'DeleteForeground' ? { propagationPolicy: 'Foreground' } : {},
        );
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
      return;
    }
    if (!sb) return;
    if (!isControlledBy(sb, claim)) {
      const status = claimStatusFor(
        claim,
        {
          kind: 'error',
          reason: ClaimReasons.claimExpired,
          message: `Claim expired. sandbox "${sbName}" is not controlled by claim "${claim.metadata.name}"; deletion skipped.`,
          keepSandboxStatus: true,
        },
        new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
      );
      await this.writeStatus(claim, status);
      return;
    }
    // Keep Finished (and the rest of the expired status) in step with the Sandbox until it is gone.
    const status = claimStatusFor(
      claim,
      { kind: 'expired', sandbox: sb },
      new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
    );
    await this.writeStatus(claim, status);
    if (!sb.metadata.deletionTimestamp) {
      try {
        await this.d.manager.client.delete(Sandboxes, ns, sb.metadata.name!, {
          preconditions: { uid: sb.metadata.uid },
        });
      } catch (err) {
        if (!isNotFound(err) && !isConflict(err)) throw err;
      }
    }
  }
}

export function registerClaimController({
  manager,
  config,
  log,
}: {
  manager: Manager;
  config: OperatorConfig;
  log: Logger;
}): ClaimReconciler {
  const scope = { namespace: config.watchNamespace };
  const claims = manager.informer<ClaimObj>(SandboxClaims, scope);
  const sandboxes = manager.informer<SandboxObj>(Sandboxes, scope);
  const pools = manager.informer<PoolObj>(SandboxWarmPools, scope);
  const templates = manager.informer<TemplateObj>(SandboxTemplates, scope);
  const policies = manager.informer<KubeObject>(NetworkPolicies, scope);
  const r = new ClaimReconciler({ manager, config, log, claims, sandboxes, pools, templates, policies });
  manager
    .controller({ name: 'sandboxclaim', workers: config.claimWorkers, reconcile: (req) => r.reconcile(req) })
    .for(claims)
    .owns(sandboxes, SandboxClaims.kind, EXTENSIONS_GROUP)
    .watches(
      pools,
      (p) => r.waitingClaims(p),
      (o, n) => !o || o.metadata.resourceVersion !== n.metadata.resourceVersion,
    );
  return r;
}

registerController('sandboxclaim', true, (op) => void registerClaimController(op));
