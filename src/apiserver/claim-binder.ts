/**
 * The claim binder of the aggregated layout (docs/aggregated-layout.md "SandboxClaims"): a SandboxClaim made through
 * the Kubernetes API (kubectl, an upstream client) for a pool the nodes serve is bound by a node-local claim, made
 * through the same create as `kubectl create sandbox` (SandboxStorage: validation, power-of-two choice of node, the
 * pool key derived from the pool's template), not by adopting a Sandbox from etcd — there are none. The Sandbox is
 * named after the claim and controlled by it (ownerReference, the claim-uid label). Level-triggered, one key per
 * claim: a pass reads the claim (informer) and its Sandbox (the store) and converges — claim a VM for an unbound
 * claim, forward the Sandbox's Ready to the claim, release the VM of a claim that is gone, expire by the claim's
 * lifecycle (shutdownTime → the node's lease; ttlSecondsAfterFinished and shutdownPolicy as in the CRD layout).
 * A bound claim whose Sandbox has gone is never claimed for again (one claim, one VM); it says why it is gone.
 * Claims the node-local gateway delivers (label gateway-node) are recorded by the gateway and left alone here.
 */
import {
  AnnotationKeys,
  ClaimBinderSandboxKeys,
  CocoonAnnotationKeys,
  withoutServerWrittenKeys,
  LabelKeys,
  type Condition,
  type Sandbox,
  type SandboxClaim,
  type SandboxClaimStatus,
  type SandboxTemplate,
  type SandboxWarmPool,
  kubeTime,
} from '../api/index.js';
import {
  ClaimInputError,
  injectEnv,
  loadAllowedLabelDomains,
  mergePodMetadata,
  validateAdditionalPodMetadata,
} from '../api/claim-injection.js';
import { claimStatusFor, ClaimReasons, sameStatus, timeLeft, type ClaimOutcome } from '../api/claim-status.js';
import { SandboxError } from '../errors.js';
import { derivePoolKey, describePoolKey, poolKeyString } from '../api/pool-key.js';
import type { ObjectMeta } from '../api/meta.js';
import {
  Controller,
  controllerRef,
  isNotFound,
  SandboxClaims,
  type Informer,
  type KubeClient,
  type ReconcileRequest,
  type ReconcileResult,
} from '../kube/index.js';
import type { Logger } from '../log/logger.js';
import type { Registry } from 'prom-client';
import { toSandbox, type SandboxEntry } from './sandboxes/entry.js';
import type { Fleet } from './sandboxes/fleet.js';
import type { SandboxStorage } from './sandboxes/storage.js';
import type { SandboxStore } from './sandboxes/store.js';
import { StatusFailure } from './status.js';

type ClaimObj = SandboxClaim & { metadata: ObjectMeta };
type PoolObj = SandboxWarmPool & { metadata: ObjectMeta };
type TemplateObj = SandboxTemplate & { metadata: ObjectMeta };

/** How a Sandbox of a bound claim went away, as the claim's Ready reason says it. */
interface Gone {
  reason: typeof ClaimReasons.sandboxExpired | typeof ClaimReasons.sandboxMissing;
  message: string;
  at: string;
}

/** Retry of a claim waiting for warm capacity (the create's own Retry-After is 1 s). */
const CAPACITY_RETRY_MS = 1000;
/** Retry of a claim whose pool no node serves, or whose pool or template is missing (their events also requeue). */
const CONFIG_RETRY_MS = 5000;
/** A lease that ends within this of the deadline counts as expired, not as released by someone. */
const EXPIRY_SLACK_MS = 2000;
/** How many gone Sandboxes are remembered for their claims' status (oldest forgotten first). */
const GONE_MEMORY = 10_000;

/** The claim UID a Sandbox of this binder carries, or undefined when another path made it. */
export function binderClaimUid(e: SandboxEntry): string | undefined {
  const uid = e.object.metadata.labels?.[LabelKeys.claimUid];
  const ref = e.object.metadata.ownerReferences?.find((r) => r.controller);
  return uid && ref?.kind === SandboxClaims.kind && ref.uid === uid ? uid : undefined;
}

export interface ClaimBinderOptions {
  client: KubeClient;
  claims: Informer<ClaimObj>;
  pools: Informer<PoolObj>;
  templates: Informer<TemplateObj>;
  store: SandboxStore;
  storage: SandboxStorage;
  fleet: Fleet;
  log: Logger;
  registry?: Registry;
  /** Every claim and every binder Sandbox is looked at again this often. @default 30000 */
  resyncMs?: number;
  workers?: number;
}

export class ClaimBinder {
  private readonly controller: Controller;
  /** Keys (`ns/name`) of the Sandboxes this binder made that the store holds. */
  private readonly mine = new Set<string>();
  private readonly gone = new Map<string, Gone>();
  private readonly allowedLabelDomains = loadAllowedLabelDomains();

  constructor(private readonly o: ClaimBinderOptions) {
    this.controller = new Controller({
      name: 'aggregated-claim-binder',
      workers: o.workers ?? 4,
      reconcile: (req) => this.reconcile(req),
      logger: o.log,
      registry: o.registry,
      timeoutMs: 90_000,
    });
    this.controller.for(o.claims);
    const byPool = (ns: string | undefined, pool: string) =>
      o.claims
        .list()
        .filter((c) => c.metadata.namespace === ns && c.spec.warmPoolRef?.name === pool)
        .map((c) => `${ns}/${c.metadata.name}`);
    this.controller.watches(o.pools, (p) => byPool(p.metadata.namespace, p.metadata.name!));
    this.controller.watches(o.templates, (t) =>
      o.pools
        .list()
        .filter(
          (p) => p.metadata.namespace === t.metadata.namespace && p.spec.sandboxTemplateRef.name === t.metadata.name,
        )
        .flatMap((p) => byPool(p.metadata.namespace, p.metadata.name!)),
    );
  }

  /** Run until the signal aborts (the caller holds the lease and has synced the informers). */
  async run(signal: AbortSignal): Promise<void> {
    // The store fills from the nodes' feeds; before every node has answered, an unbound-looking claim may hold a VM.
    while (!this.o.fleet.allSynced() && !signal.aborted) await new Promise((r) => setTimeout(r, 100));
    const unsubscribe = this.o.store.log.subscribe({
      deliver: (ev) => {
        const e = ev.type === 'DELETED' ? ev.prev! : ev.next;
        if (!binderClaimUid(e)) return;
        if (ev.type === 'DELETED') {
          this.mine.delete(e.key);
          this.noteGone(e);
        } else this.mine.add(e.key);
        this.controller.enqueue(e.key);
      },
    });
    for (const e of this.o.store.snapshot('')) if (binderClaimUid(e)) this.mine.add(e.key);
    const resync = () => {
      for (const c of this.o.claims.list()) this.controller.enqueue(`${c.metadata.namespace}/${c.metadata.name}`);
      for (const k of this.mine) this.controller.enqueue(k);
    };
    resync();
    const timer = setInterval(resync, this.o.resyncMs ?? 30_000);
    try {
      await this.controller.run(signal);
    } finally {
      clearInterval(timer);
      unsubscribe();
    }
  }

  private noteGone(e: SandboxEntry): void {
    const uid = binderClaimUid(e)!;
    const now = Date.now();
    const expired = Date.parse(e.deadline) <= now + EXPIRY_SLACK_MS;
    this.gone.set(uid, {
      reason: expired ? ClaimReasons.sandboxExpired : ClaimReasons.sandboxMissing,
      message: expired
        ? `the lease of sandbox ${e.claimId} on node ${e.node} ended`
        : `sandbox ${e.claimId} was released on node ${e.node}`,
      at: kubeTime(now),
    });
    if (this.gone.size > GONE_MEMORY) this.gone.delete(this.gone.keys().next().value!);
  }

  async reconcile(req: ReconcileRequest): Promise<ReconcileResult | void> {
    const ns = req.namespace!;
    const claim = this.o.claims.getByName(ns, req.name);
    const entry = this.o.store.get(`${ns}/${req.name}`);
    const owner = entry && binderClaimUid(entry);
    if (!claim || claim.metadata.deletionTimestamp) {
      if (entry && owner) await this.release(entry, 'its claim was deleted');
      return;
    }
    if (claim.metadata.labels?.[CocoonAnnotationKeys.gatewayNode]) return;
    if (entry && owner && owner !== claim.metadata.uid) {
      await this.release(entry, 'it belonged to an earlier claim of this name');
      return { requeueAfterMs: 1 };
    }
    const left = timeLeft(claim.spec.lifecycle, claim.status?.conditions, Date.now());
    const again = left.leftMs !== undefined ? { requeueAfterMs: left.leftMs + 1 } : undefined;
    if (left.expired) return this.expire(claim, owner ? entry : undefined);
    if (entry && owner) {
      await this.writeStatus(claim, { kind: 'sandbox', sandbox: toSandbox(entry) });
      return again;
    }
    if (claim.metadata.annotations?.[CocoonAnnotationKeys.claimId]) {
      // Bound before, and its Sandbox is gone: say why, never claim a second VM for it.
      await this.writeStatus(claim, { kind: 'sandbox', sandbox: this.finalSandbox(claim) });
      return again;
    }
    return this.bind(claim, entry, again);
  }

  /** What a gone Sandbox last was, as the claim's status forwards it: Ready=False with the reason, Finished. */
  private finalSandbox(claim: ClaimObj): Sandbox {
    const g = this.gone.get(claim.metadata.uid!) ?? {
      reason: ClaimReasons.sandboxMissing,
      message: `no node serves sandbox ${claim.metadata.name} any more`,
      at: kubeTime(),
    };
    const prev = claim.status?.conditions?.find((c) => c.type === 'Finished');
    const at = prev?.status === 'True' ? prev.lastTransitionTime : g.at;
    const c = (type: string, status: Condition['status']): Condition => ({
      type,
      status,
      reason: g.reason,
      message: g.message,
      lastTransitionTime: at,
    });
    return {
      metadata: { name: claim.metadata.name },
      spec: {} as Sandbox['spec'], // only the status is read (claimStatusFor)
      status: { conditions: [c('Ready', 'False'), c('Finished', 'True')] },
    };
  }

  private async bind(
    claim: ClaimObj,
    taken: SandboxEntry | undefined,
    again: ReconcileResult | undefined,
  ): Promise<ReconcileResult | void> {
    const ns = claim.metadata.namespace!;
    const name = claim.metadata.name!;
    const fail = async (reason: string, message: string, retryMs?: number) => {
      await this.writeStatus(claim, { kind: 'error', reason, message, keepSandboxStatus: false });
      return retryMs === undefined ? undefined : { requeueAfterMs: retryMs };
    };
    if (claim.spec.volumeClaimTemplates?.length)
      return fail(
        ClaimReasons.vctError,
        'volumeClaimTemplates: node-local sandboxes of the aggregated layout have no persistent volumes',
      );
    const poolName = claim.spec.warmPoolRef?.name;
    const pool = poolName ? this.o.pools.getByName(ns, poolName) : undefined;
    if (!pool)
      return fail(ClaimReasons.warmPoolNotFound, `SandboxWarmPool "${poolName}" not found in ${ns}`, CONFIG_RETRY_MS);
    const tplName = pool.spec.sandboxTemplateRef.name;
    const tpl = this.o.templates.getByName(ns, tplName);
    if (!tpl)
      return fail(ClaimReasons.templateNotFound, `SandboxTemplate "${tplName}" not found in ${ns}`, CONFIG_RETRY_MS);
    const key = derivePoolKey({ annotations: tpl.metadata.annotations, podTemplate: tpl.spec.podTemplate });
    if (!key.ok) return fail(ClaimReasons.reconcilerError, `SandboxTemplate "${tplName}": ${key.message}`);
    if (!this.o.fleet.servesKey(key.key))
      return fail(
        ClaimReasons.poolNotServed,
        `no node serves pool (${describePoolKey(key.key)}) of SandboxWarmPool "${poolName}"; check the nodes' pools and the warm-pool driver`,
        CONFIG_RETRY_MS,
      );
    if (taken)
      return fail(
        ClaimReasons.reconcilerError,
        `sandbox "${name}" exists and is not controlled by this claim`,
        CONFIG_RETRY_MS,
      );
    let body: Sandbox;
    try {
      body = this.sandboxFor(claim, tpl);
    } catch (err) {
      // The CRD layout's rules and reasons (docs/claim-model.md "Injection rules").
      if (err instanceof ClaimInputError) return fail(err.reason, err.message);
      if (err instanceof SandboxError) return fail(ClaimReasons.reconcilerError, `Error seen: ${err.message}`);
      throw err;
    }
    const asked = derivePoolKey({ annotations: body.metadata?.annotations, podTemplate: body.spec.podTemplate });
    if (!asked.ok || poolKeyString(asked.key) !== poolKeyString(key.key))
      return fail(
        ClaimReasons.invalidMetadata,
        `additionalPodMetadata would move the sandbox out of pool (${describePoolKey(key.key)})`,
      );
    let entry: SandboxEntry | undefined;
    try {
      const created = await this.o.storage.create({
        namespace: ns,
        body,
        dryRun: false,
        fieldValidation: 'Strict',
        warnings: [],
        serverKeys: ClaimBinderSandboxKeys,
      });
      entry = created.entry;
    } catch (err) {
      if (!(err instanceof StatusFailure)) throw err;
      const { code, message } = err.status;
      if (code === 503)
        return fail(ClaimReasons.createPending, message ?? 'waiting for warm capacity', CAPACITY_RETRY_MS);
      // 409: a create of this name is in flight or just landed; the next pass sees the Sandbox in the store.
      if (code === 409) return { requeueAfterMs: 200 };
      return fail(ClaimReasons.reconcilerError, `creating sandbox "${name}": ${message}`);
    }
    if (!entry) throw new Error(`the create of sandbox ${ns}/${name} answered without the sandbox`);
    this.o.log.info({ claim: `${ns}/${name}`, sandbox: entry.claimId, node: entry.node }, 'claim bound');
    const annotated = await this.annotate(claim, entry, tplName);
    await this.writeStatus(annotated, { kind: 'sandbox', sandbox: toSandbox(entry) });
    return again;
  }

  /**
   * The Sandbox a claim asks for: the pool's template, with the claim's pod metadata and env injected by the rules the
   * CRD layout applies (the label domains, no override of the template's keys, the template's env policy), and its
   * shutdownTime as the lease. Throws ClaimInputError, or SandboxError for a conflict with the template.
   */
  private sandboxFor(claim: ClaimObj, tpl: TemplateObj): Sandbox {
    const extra = claim.spec.additionalPodMetadata;
    validateAdditionalPodMetadata(extra, this.allowedLabelDomains);
    const podTemplate = structuredClone(tpl.spec.podTemplate);
    podTemplate.spec = injectEnv(podTemplate.spec, claim.spec.env, tpl.spec.envVarsInjectionPolicy);
    if (extra?.labels || extra?.annotations) podTemplate.metadata = mergePodMetadata(podTemplate.metadata, extra);
    const shutdownTime = claim.spec.lifecycle?.shutdownTime;
    return {
      apiVersion: 'agents.x-k8s.io/v1beta1',
      kind: 'Sandbox',
      metadata: {
        name: claim.metadata.name,
        labels: { [LabelKeys.claimUid]: claim.metadata.uid! },
        annotations: {
          // a template's author may not write what only servers write (the gateway's delivery marks, ...)
          ...withoutServerWrittenKeys('annotations', tpl.metadata.annotations),
          [AnnotationKeys.sandboxTemplateRef]: tpl.metadata.name!,
          [CocoonAnnotationKeys.warmPool]: claim.spec.warmPoolRef.name,
        },
        ownerReferences: [controllerRef(claim, SandboxClaims)],
      },
      spec: { podTemplate, ...(shutdownTime ? { shutdownTime } : {}) },
    };
  }

  /** The adoption record upstream clients read, written once at bind (merge patch, guarded by the claim's UID). */
  private async annotate(claim: ClaimObj, e: SandboxEntry, template: string): Promise<ClaimObj> {
    const annotations = {
      [AnnotationKeys.sandboxName]: e.name,
      [AnnotationKeys.sandboxTemplateRef]: template,
      [CocoonAnnotationKeys.claimId]: e.claimId,
      [CocoonAnnotationKeys.node]: e.node,
      ...(claim.metadata.annotations?.[AnnotationKeys.controllerFirstObservedAt]
        ? {}
        : { [AnnotationKeys.controllerFirstObservedAt]: kubeTime() }),
    };
    return this.o.client.patch<ClaimObj>(
      SandboxClaims,
      claim.metadata.namespace,
      claim.metadata.name!,
      { metadata: { uid: claim.metadata.uid, annotations } },
      'merge',
    );
  }

  private async writeStatus(claim: ClaimObj, outcome: ClaimOutcome): Promise<void> {
    const status: SandboxClaimStatus = claimStatusFor(claim, outcome, kubeTime());
    if (sameStatus(claim.status, status)) return;
    try {
      await this.o.client.patch(
        SandboxClaims,
        claim.metadata.namespace,
        claim.metadata.name!,
        // A merge patch of the whole status: `sandbox: null` drops a name the outcome no longer has.
        { metadata: { uid: claim.metadata.uid }, status: { ...status, sandbox: status.sandbox ?? null } },
        'merge',
        { subresource: 'status' },
      );
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
  }

  /** docs/claim-model.md "Expiry": ClaimExpired first, then the policy (Delete: the claim; Retain: the VM). */
  private async expire(claim: ClaimObj, entry: SandboxEntry | undefined): Promise<void> {
    await this.writeStatus(claim, { kind: 'expired', sandbox: entry ? toSandbox(entry) : undefined });
    const policy = claim.spec.lifecycle?.shutdownPolicy ?? 'Retain';
    if (policy === 'Retain') {
      if (entry) await this.release(entry, 'its claim expired (shutdownPolicy Retain keeps the claim)');
      return;
    }
    try {
      await this.o.client.delete(SandboxClaims, claim.metadata.namespace, claim.metadata.name!, {
        preconditions: { uid: claim.metadata.uid },
        ...(policy === 'DeleteForeground' ? { propagationPolicy: 'Foreground' } : {}),
      });
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
  }

  private async release(e: SandboxEntry, why: string): Promise<void> {
    try {
      await this.o.storage.delete(e.namespace, e.name, { uid: e.uid, dryRun: false });
      this.o.log.info({ sandbox: e.key, claim: e.claimId, node: e.node }, `released: ${why}`);
    } catch (err) {
      if (err instanceof StatusFailure && (err.status.code === 404 || err.status.code === 409)) return;
      throw err;
    }
  }
}
