/**
 * SandboxClaim controller (docs/claim-model.md) with the L1 fast path (docs/extensions.md).
 *
 * Fast path, per claim, in one reconcile and three API writes (none of them a read):
 *   1. take a warm, Ready candidate of the claim's pool from the in-memory queue (candidates.ts);
 *   2. adopt it with ONE merge patch carrying the candidate's `metadata.resourceVersion` (the apiserver rejects it
 *      with 409 if anything changed the Sandbox since we saw it, in particular another adoption). The patch moves
 *      the controller ownerReference to the claim and sets `claim-uid`, so the binding lives on the Sandbox.
 *      Conflict -> the next candidate at once (no requeue, no backoff);
 *   3. merge-patch the claim's annotations (`sandbox-name`, `controller-first-observed-at`, `sandbox-template-ref`):
 *      before the status, because the status turns the claim Ready and a claim seen Ready must name its Sandbox;
 *   4. merge-patch the claim's status from the patch response (the Sandbox was Ready, so the claim is Ready).
 * A status write that does not turn the claim Ready goes first, and its annotations wait off the critical path.
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
  LabelKeys,
  claimV1alpha1Intent,
  resolveShadowPoolTemplate,
  kubeTime,
} from '../../api/index.js';
import {
  controllerOf,
  isControlledBy,
  keyOf,
  NetworkPolicies,
  Sandboxes,
  SandboxClaims,
  SandboxTemplates,
  SandboxWarmPools,
  type KubeObject,
  type ReconcileRequest,
  type ReconcileResult,
} from '../../kube/index.js';
import { registerController, type ControllerContext } from '../build.js';
import { foregroundOf, type Foreground } from '../foreground.js';
import { CandidateQueues } from './candidates.js';
import { adoptWarm, offerCandidate } from './claim-adoption.js';
import { ClaimBindings, Deferred } from './claim-binding.js';
import { createCold, notControlled } from './claim-cold-create.js';
import { Outcome, type ClaimContext, type ClaimDeps, type Resolved } from './claim-context.js';
import { reconcileExpired } from './claim-expiry.js';
import { syncMetadata } from './claim-metadata.js';
import { claimStatusFor, ClaimReasons, isReady, timeLeft, type ClaimOutcome } from '../../api/claim-status.js';
import { ClaimWrites } from './claim-writes.js';
import { ClaimInputError, loadAllowedLabelDomains, validateAdditionalPodMetadata } from '../../api/claim-injection.js';
import { extensionMetrics, type ExtensionMetrics } from './metrics.js';
import {
  operatorEventRecorder,
  type EventRecorder,
  type ClaimObj,
  type PoolObj,
  type SandboxObj,
  type TemplateObj,
} from './support.js';

const CLAIM_BY_POOL_INDEX = 'ext:claim-by-pool';
const NOT_FOUND_REQUEUE_MS = 60_000;

export class ClaimReconciler implements ClaimContext {
  readonly candidates = new CandidateQueues();
  readonly bindings: ClaimBindings;
  readonly writes: ClaimWrites;
  private readonly allowedLabelDomains = loadAllowedLabelDomains();
  readonly metrics: ExtensionMetrics;
  readonly events: EventRecorder;
  /** Claims waiting for a Sandbox are reported here; the writes they set off yield to them. */
  private readonly foreground: Foreground;

  constructor(readonly d: ClaimDeps) {
    this.metrics = extensionMetrics(d.manager.registry);
    this.events = operatorEventRecorder(d.manager.client, d.log, d.manager.registry);
    this.bindings = new ClaimBindings(d);
    this.writes = new ClaimWrites(d.manager.client, this.bindings);
    this.foreground = foregroundOf(d.manager);
    d.claims.addIndex(CLAIM_BY_POOL_INDEX, (c) => [`${c.metadata.namespace}/${c.spec.warmPoolRef.name}`]);
    const offer = (sb: SandboxObj) => offerCandidate(this, sb);
    d.sandboxes.addHandler({
      onAdd: offer,
      onUpdate: (_o, n) => offer(n),
      onDelete: (sb) => {
        this.candidates.forget(sb.metadata.namespace!, sb.metadata.name!);
        this.bindings.sandboxDeleted(sb);
      },
    });
    const observeClaim = (c: ClaimObj) => {
      this.bindings.observeClaim(c);
      this.writes.observeClaim(c);
      if (!c.metadata.deletionTimestamp && !isReady(c.status)) this.foreground.touch();
    };
    d.claims.addHandler({
      onAdd: observeClaim,
      onUpdate: (_o, n) => observeClaim(n),
      onDelete: (c) => this.forget(c.metadata.uid!),
    });
    d.pools.addHandler({ onDelete: (p) => this.candidates.dropPool(p.metadata.namespace!, p.metadata.name!) });
  }

  private forget(uid: string): void {
    this.writes.forget(uid);
    this.bindings.forget(uid);
    this.foreground.release(`claim:${uid}`);
  }

  /** Claims of a pool still waiting for a Sandbox (woken when the pool appears or changes). */
  waitingClaims(pool: PoolObj): string[] {
    return this.d.claims
      .byIndex(CLAIM_BY_POOL_INDEX, keyOf(pool))
      .filter((c) => !c.status?.sandbox?.name)
      .map(keyOf);
  }

  async reconcile(req: ReconcileRequest): Promise<ReconcileResult | void> {
    const cached = this.d.claims.get(req.key);
    // A claim still waiting for its Sandbox is foreground until its pass is over.
    const waiting = !!cached && !cached.metadata.deletionTimestamp && !isReady(this.writes.latest(cached).status);
    if (waiting) this.foreground.begin();
    try {
      return await this.pass(req);
    } finally {
      if (waiting) this.foreground.end();
    }
  }

  private async pass(req: ReconcileRequest): Promise<ReconcileResult | void> {
    await this.bindings.fenceOnce();
    const cached = this.d.claims.get(req.key);
    if (!cached) return;
    const uid = cached.metadata.uid!;
    const claim = this.writes.latest(cached);
    this.deleteLegacyNetworkPolicy(claim);
    if (claim.metadata.deletionTimestamp) return;
    if (!(await this.bindings.confirmClaim(claim))) return;

    const now = Date.now();
    const tl = timeLeft(claim.spec.lifecycle, claim.status?.conditions, now);
    if (tl.expired) return reconcileExpired(this, claim);

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
      // Inside the restart settle window: no status, no annotations, no events (docs/extensions.md), only a requeue
      // for when it ends.
      if (err instanceof Deferred) return { requeueAfterMs: err.requeueMs };
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

    const status = claimStatusFor(claim, outcome, kubeTime());
    const becameReady = !isReady(claim.status) && isReady(status);
    // A claim seen Ready already says what it is (docs/claim-model.md "The pass", step 5; upstream's observability
    // and warm-adoption tests watch for it): when this status write turns it Ready, the pending annotations go
    // first. The same two claim writes as otherwise, only in this order. Any other time the status goes first (it
    // is what clients wait for) and the annotations yield to claims still waiting for a Sandbox.
    let current = claim;
    if (becameReady && this.writes.annotationsPending(claim, resolved))
      current = (await this.writes.writeAnnotations(claim, resolved)) ?? claim;
    const afterStatus = await this.writes.writeStatus(current, status);
    if (becameReady && resolved) this.observeLatency(current, resolved, launched);
    current = afterStatus ?? current;
    const held = this.writes.annotationsPending(current, resolved) ? this.foreground.hold(`claim:${uid}`) : 0;
    if (held > 0) requeueMs = Math.min(requeueMs ?? Infinity, held);
    else await this.writes.writeAnnotations(current, resolved);
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
      a[AnnotationKeys.controllerFirstObservedAt] ?? this.writes.firstObservedAt(claim.metadata.uid!),
    );
  }

  private deleteLegacyNetworkPolicy(claim: ClaimObj): void {
    const np = this.d.policies.getByName(claim.metadata.namespace, `${claim.metadata.name}-network-policy`);
    if (!np || !isControlledBy(np, claim) || controllerOf(np)?.kind !== SandboxClaims.kind) return;
    this.d.manager.client
      .delete(NetworkPolicies, np.metadata.namespace, np.metadata.name!, { preconditions: { uid: np.metadata.uid } })
      .catch((err: unknown) => this.d.log.debug({ err }, 'legacy NetworkPolicy not deleted'));
  }

  private async resolve(claim: ClaimObj, launched: (l: 'warm' | 'cold') => void): Promise<Resolved> {
    const ns = claim.metadata.namespace!;
    const poolName = claim.spec.warmPoolRef.name;
    const pool = this.d.pools.getByName(ns, poolName);
    const templateName = pool ? pool.spec.sandboxTemplateRef.name : resolveShadowPoolTemplate(poolName);
    const template = templateName ? this.d.templates.getByName(ns, templateName) : undefined;

    const bound = (await this.bindings.bound(claim)) ?? (await this.bindings.recoverFromPredecessor(claim));
    if (bound) return { sandbox: await syncMetadata(this, claim, bound, template), template: templateName };

    const sameName = this.bindings.view(ns, claim.metadata.name!, claim.metadata.uid!);
    if (sameName && !sameName.metadata.deletionTimestamp) throw notControlled(claim.metadata.name!);

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
      const adopted = await adoptWarm(this, claim, pool, template);
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
    return { sandbox: await createCold(this, claim, template), template: templateName };
  }
}

export function registerClaimController({ manager, config, log }: ControllerContext): ClaimReconciler {
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
