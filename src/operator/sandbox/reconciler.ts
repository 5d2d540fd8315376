/**
 * The Sandbox reconciler (docs/operator.md "What a reconcile does", with its "Newer upstream" semantics): PVCs → Pod →
 * Service → status, plus expiry and suspend/resume.
 *
 * L0 hygiene: every read comes from the informer caches (Pods/Services/PVCs filtered to the name-hash label key);
 * the only live read is one GET after a create answered AlreadyExists (or to confirm a suspension the cache cannot
 * see). Every write is preceded by a diff: metadata and status are merge-patched only when they changed, so a
 * resync of Ready Sandboxes writes nothing.
 */
import {
  AnnotationKeys,
  EXTENSIONS_GROUP,
  parseApiVersion,
  SANDBOX_FIELD_OWNER,
  type SandboxStatus,
} from '../../api/index.js';
import {
  controllerOf,
  isNotFound,
  keyOf,
  mergePatch,
  Pods,
  Sandboxes,
  Services,
  type Informer,
  type KubeClient,
  type ReconcileContext,
  type ReconcileRequest,
  type ReconcileResult,
} from '../../kube/index.js';
import { SandboxError } from '../../errors.js';
import type { EventRecorder } from '../events.js';
import type { RuntimeName } from '../runtime/adapter.js';
import {
  computeStatus,
  ConditionTypes,
  expiredCondition,
  expiredStatus,
  findCondition,
  isMarkedExpired,
  setCondition,
} from './conditions.js';
import { selectorOf } from './desired.js';
import { SandboxEvents } from './events.js';
import { Overlay } from './overlay.js';
import { deleteChild, type Pass } from './pass.js';
import { PodReconciler, type Hold } from './pod-reconciler.js';
import { PvcReconciler } from './pvc-reconciler.js';
import { ServiceReconciler } from './service-reconciler.js';
import type { PersistentVolumeClaim, Pod, SandboxObject, Service } from './types.js';

export interface SandboxReconcilerDeps {
  client: KubeClient;
  sandboxes: Informer<SandboxObject>;
  pods: Informer<Pod>;
  services: Informer<Service>;
  pvcs: Informer<PersistentVolumeClaim>;
  defaultRuntime: RuntimeName;
  clusterDomain: string;
  /** Lifecycle Events (events.ts); undefined with `--disable-sandbox-events`. */
  events?: EventRecorder;
  /** Called once per Ready False→True transition with the creation-to-Ready latency. */
  onReady?(sb: SandboxObject, latencyMs: number): void;
  /** Writes that can wait ask this first (claims in flight): ms to wait, 0 = now. */
  hold?: Hold;
  now?(): number;
}

/** How often a Sandbox whose children were refused is looked at again (events re-trigger it sooner). */
const REFUSAL_RECHECK_MS = 30_000;
/**
 * A warm pool member's status is written once its Pod is Ready, or this long after the member was created,
 * whichever comes first: nobody waits on a member's way there (the pool counts Ready members and times its
 * readiness grace from the creation time), and each step (Pod created, scheduled, Ready) was one more write per
 * refill, on the claims' cores.
 */
export const WARM_MEMBER_STATUS_SETTLE_MS = 2_000;

export class SandboxReconciler {
  private readonly sandboxOverlay = new Overlay<SandboxObject>();
  private readonly pvcs: PvcReconciler;
  private readonly pods: PodReconciler;
  private readonly services: ServiceReconciler;
  private readonly events: SandboxEvents;
  private readonly now: () => number;

  constructor(private readonly deps: SandboxReconcilerDeps) {
    this.now = deps.now ?? Date.now;
    this.events = new SandboxEvents(deps.events);
    this.pvcs = new PvcReconciler(deps.client, deps.pvcs);
    this.pods = new PodReconciler(
      deps.client,
      deps.pods,
      deps.defaultRuntime,
      (pass, podName) => this.setPodNameAnnotation(pass, podName),
      this.events,
      deps.hold,
    );
    this.services = new ServiceReconciler(deps.client, deps.services);
  }

  /** The freshest copy of a Sandbox: the cache, or what our last write returned if the watch has not caught up. */
  sandbox(key: string): SandboxObject | undefined {
    return this.sandboxOverlay.resolve(key, this.deps.sandboxes.get(key));
  }

  /** Drop every read-your-writes entry of a Sandbox that is gone (called from the Sandbox informer). */
  sandboxDeleted(sb: SandboxObject): void {
    const key = keyOf(sb);
    this.sandboxOverlay.forget(key);
    this.services.forget(key);
    this.pods.forget(sb.metadata.uid ?? '');
    this.pvcs.forget(sb);
    this.events.forget(sb.metadata.uid ?? '');
  }

  /** Drop read-your-writes state for a Pod that is gone (called from the pod informer). */
  podDeleted(pod: Pod): void {
    this.pods.podDeleted(pod);
  }

  readonly reconcile = async (req: ReconcileRequest, ctx: ReconcileContext): Promise<ReconcileResult | void> => {
    const sb = this.sandbox(req.key);
    if (!sb || sb.metadata.deletionTimestamp) return;
    const pass: Pass = { sb, errors: [], refusals: 0, log: ctx.log.child({ sandbox: req.key }) };
    const now = this.now();
    const shutdownAt = sb.spec.shutdownTime ? Date.parse(sb.spec.shutdownTime) : undefined;
    const generation = sb.metadata.generation ?? 0;

    if (shutdownAt !== undefined && now >= shutdownAt) {
      if (!isMarkedExpired(sb.status)) {
        // Expiry is persisted before any teardown, so it is always observable.
        const conditions = setCondition(
          sb.status?.conditions,
          expiredCondition(generation),
          new Date(now).toISOString(),
        );
        await this.writeStatus(pass, { ...(sb.status ?? {}), conditions });
        pass.log.info('sandbox expired');
        return { requeueAfterMs: 1 };
      }
      return this.teardownExpired(pass);
    }

    for (const vct of sb.spec.volumeClaimTemplates ?? []) await this.pvcs.reconcile(pass, vct);
    const pod = await this.pods.reconcile(pass);
    const service = pod.multiple ? undefined : await this.services.reconcile(pass);

    const prev = pass.sb.status;
    // A held Pod sync leaves the Pod as the previous generation made it: the status says so.
    const observed = pass.heldMs
      ? (findCondition(prev?.conditions, ConditionTypes.ready)?.observedGeneration ?? generation)
      : generation;
    let next = computeStatus(
      prev,
      {
        generation: observed,
        suspended: sb.spec.operatingMode === 'Suspended',
        pod: pod.pod,
        podOwned: pod.owned,
        suspendedState: pod.suspendedState,
        multiplePods: pod.multiple,
        errors: pass.errors,
        invalid: pass.invalid,
        serviceRequired: service?.required ?? false,
        serviceExists: service?.exists ?? false,
        service: service
          ? service.inUse
            ? {
                name: sb.metadata.name ?? '',
                fqdn: `${sb.metadata.name}.${sb.metadata.namespace}.svc.${this.deps.clusterDomain}`,
              }
            : undefined
          : prev?.service
            ? { name: prev.service, fqdn: prev.serviceFQDN ?? '' }
            : undefined,
        selector: selectorOf(sb.metadata.name ?? ''),
      },
      new Date(now).toISOString(),
    );
    let requeueAfterMs =
      pass.heldMs === undefined ? pod.requeueAfterMs : Math.min(pod.requeueAfterMs ?? Infinity, pass.heldMs);
    if (shutdownAt !== undefined) {
      const after = this.now();
      if (after >= shutdownAt) {
        next = {
          ...next,
          conditions: setCondition(next.conditions, expiredCondition(generation), new Date(after).toISOString()),
        };
        requeueAfterMs = 1;
      } else requeueAfterMs = Math.min(requeueAfterMs ?? Infinity, shutdownAt - after + 10);
    }
    const settling = this.warmMemberSettling(pass, next, pod.pod);
    if (settling > 0) return { requeueAfterMs: Math.min(requeueAfterMs ?? Infinity, settling) };
    await this.writeStatus(pass, next);
    if (pass.errors.length > pass.refusals) throw new SandboxError('sandbox.children', pass.errors.join('; '));
    if (pass.refusals) requeueAfterMs = Math.min(requeueAfterMs ?? Infinity, REFUSAL_RECHECK_MS);
    return requeueAfterMs === undefined ? undefined : { requeueAfterMs };
  };

  /** How long a warm member's not-yet-Ready status may stay unwritten (0: write it now). */
  private warmMemberSettling(pass: Pass, next: SandboxStatus, pod: Pod | undefined): number {
    const { sb } = pass;
    const owner = controllerOf(sb);
    if (owner?.kind !== 'SandboxWarmPool' || parseApiVersion(owner.apiVersion).group !== EXTENSIONS_GROUP) return 0;
    if (!pod || pass.errors.length || findCondition(next.conditions, ConditionTypes.ready)?.status === 'True') return 0;
    const age = this.now() - Date.parse(sb.metadata.creationTimestamp ?? '');
    return Number.isFinite(age) ? Math.max(0, Math.ceil(WARM_MEMBER_STATUS_SETTLE_MS - age)) : 0;
  }

  // ---- expiry ------------------------------------------------------------------------------------------------

  private async teardownExpired(pass: Pass): Promise<ReconcileResult | void> {
    const { sb } = pass;
    const ns = sb.metadata.namespace;
    for (const pod of this.pods.ownedPods(sb)) await deleteChild(this.deps.client, pass, Pods, pod, 'pod');
    const svc = this.services.cached(sb);
    if (svc && controllerOf(svc)?.uid === sb.metadata.uid)
      await deleteChild(this.deps.client, pass, Services, svc, 'service');
    if (sb.spec.shutdownPolicy === 'Delete') {
      if (pass.errors.length) throw new SandboxError('sandbox.expiry', pass.errors.join('; '));
      try {
        await this.deps.client.delete(Sandboxes, ns, sb.metadata.name ?? '', {
          preconditions: { uid: sb.metadata.uid },
        });
        pass.log.info('expired sandbox deleted (shutdownPolicy Delete)');
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
      return;
    }
    if (pass.errors.length) throw new SandboxError('sandbox.expiry', pass.errors.join('; '));
    await this.writeStatus(pass, expiredStatus(sb.status));
  }

  // ---- the Sandbox's own writes ------------------------------------------------------------------------------

  /** Set (or with undefined, remove) the Sandbox's pod-name annotation, only if it differs. */
  private async setPodNameAnnotation(pass: Pass, podName: string | undefined): Promise<void> {
    const current = pass.sb.metadata.annotations?.[AnnotationKeys.podName];
    if (current === podName) return;
    const sb = pass.sb;
    try {
      const updated = await this.deps.client.patch<SandboxObject>(
        Sandboxes,
        sb.metadata.namespace,
        sb.metadata.name ?? '',
        { metadata: { annotations: { [AnnotationKeys.podName]: podName ?? null } } },
        'merge',
        { fieldManager: SANDBOX_FIELD_OWNER },
      );
      this.sandboxOverlay.remember(keyOf(sb), updated);
      pass.sb = updated;
    } catch (err) {
      if (!isNotFound(err)) pass.errors.push(`set pod-name annotation: ${(err as Error).message}`);
    }
  }

  /** Merge-patch /status with exactly what changed; nothing when nothing did. */
  private async writeStatus(pass: Pass, next: SandboxStatus): Promise<void> {
    const sb = pass.sb;
    const patch = mergePatch({ status: sb.status ?? {} }, { status: next });
    if (!patch) return;
    try {
      const updated = await this.deps.client.patch<SandboxObject>(
        Sandboxes,
        sb.metadata.namespace,
        sb.metadata.name ?? '',
        patch,
        'merge',
        {
          subresource: 'status',
          fieldManager: SANDBOX_FIELD_OWNER,
        },
      );
      this.sandboxOverlay.remember(keyOf(sb), updated);
      pass.sb = updated;
    } catch (err) {
      if (isNotFound(err)) return;
      throw err;
    }
    this.events.statusWritten(sb, sb.status, next);
    const before = findCondition(sb.status?.conditions, ConditionTypes.ready);
    const after = findCondition(next.conditions, ConditionTypes.ready);
    if (after?.status === 'True' && before?.status !== 'True' && sb.metadata.creationTimestamp) {
      this.deps.onReady?.(sb, Date.parse(after.lastTransitionTime) - Date.parse(sb.metadata.creationTimestamp));
    }
    const reason = after?.reason;
    if (reason !== before?.reason) pass.log.info({ ready: after?.status, reason }, 'sandbox status changed');
  }
}
