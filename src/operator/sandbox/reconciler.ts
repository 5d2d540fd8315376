/**
 * The Sandbox reconciler (agent-sandbox-spec §6 with the newer-upstream semantics of §13): PVCs → Pod →
 * Service → status, plus expiry and suspend/resume.
 *
 * L0 hygiene: every read comes from the informer caches (Pods/Services/PVCs filtered to the name-hash label key);
 * the only live read is one GET after a create answered AlreadyExists (or to confirm a suspension the cache cannot
 * see). Every write is preceded by a diff: metadata and status are merge-patched only when they changed, so a
 * resync of Ready Sandboxes writes nothing.
 */
import {
  AnnotationKeys,
  LabelKeys,
  SANDBOX_FIELD_OWNER,
  type PersistentVolumeClaimTemplate,
  type SandboxStatus,
} from '../../api/index.js';
import {
  controllerOf,
  isAlreadyExists,
  isNotFound,
  keyOf,
  mergePatch,
  PersistentVolumeClaims,
  Pods,
  Sandboxes,
  Services,
  type Informer,
  type KubeClient,
  type ReconcileContext,
  type ReconcileRequest,
  type ReconcileResult,
  type ResourceType,
} from '../../kube/index.js';
import { SandboxError } from '../../errors.js';
import type { Logger } from '../../log/logger.js';
import type { RuntimeName } from '../runtime/adapter.js';
import {
  computeStatus,
  ConditionTypes,
  expiredCondition,
  expiredStatus,
  findCondition,
  isMarkedExpired,
  setCondition,
  type SuspendedState,
} from './conditions.js';
import {
  buildPod,
  buildPvc,
  buildService,
  cannotAdoptMessage,
  foreignOwnerMessage,
  isAdoptable,
  nameHashOf,
  podNameOf,
  pvcNameOf,
  repairedService,
  sandboxOwnerRef,
  selectorOf,
  syncedPodMetadata,
} from './desired.js';
import { isNewer, Overlay } from './overlay.js';
import type { PersistentVolumeClaim, Pod, SandboxObject, Service } from './types.js';

/** Pods indexed by the UID of their controlling Sandbox. */
export const POD_OWNER_INDEX = 'sandbox:controller-uid';

/** How often a suspension blocked by a Pod the caches cannot see is re-checked. */
const BLOCKED_SUSPEND_RECHECK_MS = 5_000;

export interface SandboxReconcilerDeps {
  client: KubeClient;
  sandboxes: Informer<SandboxObject>;
  pods: Informer<Pod>;
  services: Informer<Service>;
  pvcs: Informer<PersistentVolumeClaim>;
  defaultRuntime: RuntimeName;
  clusterDomain: string;
  /** Called once per Ready False→True transition with the creation-to-Ready latency. */
  onReady?(sb: SandboxObject, latencyMs: number): void;
  now?(): number;
}

interface PodOutcome {
  pod: Pod | undefined;
  owned: boolean;
  suspendedState?: SuspendedState;
  multiple?: number;
  requeueAfterMs?: number;
}

/** One reconcile pass: the Sandbox (freshest known copy) and the errors its children produced. */
interface Pass {
  sb: SandboxObject;
  /** Every child error of the pass, in order (they all go into the Ready message). */
  errors: string[];
  /** How many of them are refusals (ownership, adoption, runtime conflicts) that retrying cannot fix. */
  refusals: number;
  log: Logger;
}

/** A refusal: reported like any error, but re-checked on a slow timer instead of a hot backoff. */
function refuse(pass: Pass, message: string): void {
  pass.errors.push(message);
  pass.refusals++;
}

/** How often a Sandbox whose children were refused is looked at again (events re-trigger it sooner). */
const REFUSAL_RECHECK_MS = 30_000;

export class SandboxReconciler {
  private readonly sandboxOverlay = new Overlay<SandboxObject>();
  /** Pods we created or adopted, by Sandbox UID, until the pod cache has them. */
  private readonly podOverlay = new Overlay<Pod>();
  private readonly serviceOverlay = new Overlay<Service>();
  private readonly pvcOverlay = new Overlay<PersistentVolumeClaim>();
  private readonly now: () => number;

  constructor(private readonly deps: SandboxReconcilerDeps) {
    this.now = deps.now ?? Date.now;
  }

  /** The freshest copy of a Sandbox: the cache, or what our last write returned if the watch has not caught up. */
  sandbox(key: string): SandboxObject | undefined {
    return this.sandboxOverlay.resolve(key, this.deps.sandboxes.get(key));
  }

  /** Drop every read-your-writes entry of a Sandbox that is gone (called from the Sandbox informer). */
  sandboxDeleted(sb: SandboxObject): void {
    const key = keyOf(sb);
    this.sandboxOverlay.forget(key);
    this.serviceOverlay.forget(key);
    this.podOverlay.forget(sb.metadata.uid ?? '');
    for (const vct of sb.spec.volumeClaimTemplates ?? [])
      this.pvcOverlay.forget(`${sb.metadata.namespace}/${pvcNameOf(vct, sb.metadata.name ?? '')}`);
  }

  /** Drop read-your-writes state for a Pod that is gone (called from the pod informer). */
  podDeleted(pod: Pod): void {
    const ref = controllerOf(pod);
    if (ref) this.podOverlay.forget(ref.uid);
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

    for (const vct of sb.spec.volumeClaimTemplates ?? []) await this.reconcilePvc(pass, vct);
    const pod = await this.reconcilePod(pass);
    const service = pod.multiple ? undefined : await this.reconcileService(pass);

    const prev = pass.sb.status;
    let next = computeStatus(
      prev,
      {
        generation,
        suspended: sb.spec.operatingMode === 'Suspended',
        pod: pod.pod,
        podOwned: pod.owned,
        suspendedState: pod.suspendedState,
        multiplePods: pod.multiple,
        errors: pass.errors,
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
    let requeueAfterMs = pod.requeueAfterMs;
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
    await this.writeStatus(pass, next);
    if (pass.errors.length > pass.refusals) throw new SandboxError('sandbox.children', pass.errors.join('; '));
    if (pass.refusals) requeueAfterMs = Math.min(requeueAfterMs ?? Infinity, REFUSAL_RECHECK_MS);
    return requeueAfterMs === undefined ? undefined : { requeueAfterMs };
  };

  // ---- expiry ------------------------------------------------------------------------------------------------

  private async teardownExpired(pass: Pass): Promise<ReconcileResult | void> {
    const { sb } = pass;
    const ns = sb.metadata.namespace;
    for (const pod of this.ownedPods(sb)) await this.deleteChild(pass, Pods, pod, 'pod');
    const svc = this.cachedService(sb);
    if (svc && controllerOf(svc)?.uid === sb.metadata.uid) await this.deleteChild(pass, Services, svc, 'service');
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

  private async deleteChild(pass: Pass, rt: ResourceType, obj: Pod | Service, what: string): Promise<void> {
    if (obj.metadata.deletionTimestamp) return;
    try {
      await this.deps.client.delete(rt, obj.metadata.namespace, obj.metadata.name ?? '', {
        preconditions: { uid: obj.metadata.uid },
      });
      pass.log.info({ [what]: obj.metadata.name }, `${what} deleted`);
    } catch (err) {
      if (!isNotFound(err)) pass.errors.push(`delete ${what} "${obj.metadata.name}": ${(err as Error).message}`);
    }
  }

  // ---- PVCs --------------------------------------------------------------------------------------------------

  private async reconcilePvc(pass: Pass, vct: PersistentVolumeClaimTemplate): Promise<void> {
    const { sb } = pass;
    const name = pvcNameOf(vct, sb.metadata.name ?? '');
    const key = `${sb.metadata.namespace}/${name}`;
    let pvc = this.pvcOverlay.resolve(key, this.deps.pvcs.get(key), { whenMissing: true });
    if (!pvc) {
      try {
        pvc = await this.deps.client.create(PersistentVolumeClaims, buildPvc(sb, vct), {
          fieldManager: SANDBOX_FIELD_OWNER,
        });
        this.pvcOverlay.remember(key, pvc);
        pass.log.info({ pvc: name }, 'pvc created');
        return;
      } catch (err) {
        if (!isAlreadyExists(err)) {
          pass.errors.push(`create PVC "${name}": ${(err as Error).message}`);
          return;
        }
        pvc = await this.liveGet<PersistentVolumeClaim>(PersistentVolumeClaims, sb.metadata.namespace, name);
        if (!pvc) {
          pass.errors.push(`PVC "${name}" already exists but could not be read`);
          return;
        }
      }
    }
    const ref = controllerOf(pvc);
    if (ref?.uid === sb.metadata.uid) return;
    if (ref) {
      refuse(pass, foreignOwnerMessage('PVC', name, ref, sb.metadata.name ?? ''));
      return;
    }
    if (!isAdoptable(pvc.metadata.labels, sb.metadata.name ?? '')) {
      refuse(pass, cannotAdoptMessage('PVC', name));
      return;
    }
    const patch = {
      metadata: {
        ownerReferences: [...(pvc.metadata.ownerReferences ?? []), sandboxOwnerRef(sb)],
        labels: { [LabelKeys.sandboxNameHash]: nameHashOf(sb.metadata.name ?? '') },
      },
    };
    const adopted = await this.deps.client.patch<PersistentVolumeClaim>(
      PersistentVolumeClaims,
      sb.metadata.namespace,
      name,
      patch,
      'merge',
      {
        fieldManager: SANDBOX_FIELD_OWNER,
      },
    );
    this.pvcOverlay.remember(key, adopted);
    pass.log.info({ pvc: name }, 'pvc adopted');
  }

  // ---- Pod ---------------------------------------------------------------------------------------------------

  /** Pods controlled by this Sandbox (ownership by UID is authoritative), including one we just wrote. */
  private ownedPods(sb: SandboxObject): Pod[] {
    const uid = sb.metadata.uid ?? '';
    const cached = this.deps.pods.byIndex(POD_OWNER_INDEX, uid);
    const written = this.podOverlay.peek(uid);
    if (!written) return cached;
    const i = cached.findIndex((p) => p.metadata.uid === written.metadata.uid);
    if (i < 0) return [...cached, written];
    if (isNewer(written, cached[i]!)) return cached.map((p, j) => (j === i ? written : p));
    this.podOverlay.forget(uid);
    return cached;
  }

  private async reconcilePod(pass: Pass): Promise<PodOutcome> {
    const { sb } = pass;
    const owned = this.ownedPods(sb);
    if (sb.spec.operatingMode === 'Suspended') return this.suspendPod(pass, owned);
    if (owned.length > 1) {
      pass.log.warn(
        { pods: owned.map((p) => p.metadata.name) },
        'multiple pods are controlled by this sandbox; refusing to choose',
      );
      return { pod: undefined, owned: false, multiple: owned.length };
    }
    if (owned.length === 1) {
      const pod = await this.syncPod(pass, owned[0]!, false);
      await this.setPodNameAnnotation(pass, pod.metadata.name ?? '');
      return { pod, owned: true };
    }

    const name = podNameOf(sb);
    let pod = this.deps.pods.getByName(sb.metadata.namespace, name);
    if (!pod) {
      let desired: Pod;
      try {
        desired = buildPod(sb, name, this.deps.defaultRuntime);
      } catch (err) {
        refuse(pass, `mutate sandbox pod: ${(err as Error).message}`);
        return { pod: undefined, owned: false };
      }
      try {
        pod = await this.deps.client.create(Pods, desired, { fieldManager: SANDBOX_FIELD_OWNER });
        this.podOverlay.remember(sb.metadata.uid ?? '', pod);
        pass.log.info({ pod: name }, 'pod created');
        await this.setPodNameAnnotation(pass, name);
        return { pod, owned: true };
      } catch (err) {
        if (!isAlreadyExists(err)) {
          pass.errors.push(`create pod "${name}": ${(err as Error).message}`);
          return { pod: undefined, owned: false };
        }
        // Rare path: a Pod the filtered cache cannot see (no name-hash label) holds the name.
        pod = await this.liveGet<Pod>(Pods, sb.metadata.namespace, name);
        if (!pod) {
          pass.errors.push(`pod "${name}" already exists but could not be read`);
          return { pod: undefined, owned: false };
        }
      }
    }
    const ref = controllerOf(pod);
    if (ref && ref.uid !== sb.metadata.uid) {
      await this.setPodNameAnnotation(pass, undefined);
      refuse(pass, foreignOwnerMessage('pod', name, ref, sb.metadata.name ?? ''));
      return { pod: undefined, owned: false };
    }
    if (!ref && !isAdoptable(pod.metadata.labels, sb.metadata.name ?? '')) {
      refuse(pass, cannotAdoptMessage('pod', name));
      return { pod: undefined, owned: false };
    }
    const synced = await this.syncPod(pass, pod, !ref);
    await this.setPodNameAnnotation(pass, name);
    return { pod: synced, owned: true };
  }

  /** Adopt (when `adopt`) and re-sync labels/annotations in one merge patch; the Pod spec is never reconciled. */
  private async syncPod(pass: Pass, pod: Pod, adopt: boolean): Promise<Pod> {
    const { sb } = pass;
    if (pod.metadata.deletionTimestamp) return pod;
    const want = syncedPodMetadata(pod, sb);
    const diff = mergePatch(
      { labels: pod.metadata.labels ?? {}, annotations: pod.metadata.annotations ?? {} },
      { labels: want.labels, annotations: want.annotations },
    ) as Record<string, unknown> | undefined;
    if (!diff && !adopt) return pod;
    const metadata: Record<string, unknown> = { ...(diff ?? {}) };
    if (adopt) metadata.ownerReferences = [...(pod.metadata.ownerReferences ?? []), sandboxOwnerRef(sb)];
    try {
      const updated = await this.deps.client.patch<Pod>(
        Pods,
        pod.metadata.namespace,
        pod.metadata.name ?? '',
        { metadata },
        'merge',
        {
          fieldManager: SANDBOX_FIELD_OWNER,
        },
      );
      this.podOverlay.remember(sb.metadata.uid ?? '', updated);
      if (adopt) pass.log.info({ pod: pod.metadata.name }, 'pod adopted');
      return updated;
    } catch (err) {
      if (isNotFound(err)) return pod;
      pass.errors.push(`sync pod "${pod.metadata.name}": ${(err as Error).message}`);
      return pod;
    }
  }

  /** Suspend: delete owned Pods only; report whether the Pod is gone, going, or not ours to delete. */
  private async suspendPod(pass: Pass, owned: Pod[]): Promise<PodOutcome> {
    const { sb } = pass;
    await this.setPodNameAnnotation(pass, undefined);
    if (owned.length) {
      for (const pod of owned) await this.deleteChild(pass, Pods, pod, 'pod');
      return { pod: owned[0], owned: true, suspendedState: pass.errors.length ? 'PodStateUnknown' : 'PodTerminating' };
    }
    const name = podNameOf(sb);
    const cached = this.deps.pods.getByName(sb.metadata.namespace, name);
    if (cached) {
      pass.log.info({ pod: name }, 'not deleting a pod this sandbox does not own');
      return { pod: cached, owned: false, suspendedState: 'PodNotOwned' };
    }
    const suspended = findCondition(sb.status?.conditions, ConditionTypes.suspended);
    if (suspended?.status === 'True') return { pod: undefined, owned: false, suspendedState: 'PodTerminated' };
    // Not yet confirmed: the filtered cache cannot see an unlabeled Pod holding the name, so look once.
    let live: Pod | undefined;
    try {
      live = await this.liveGet<Pod>(Pods, sb.metadata.namespace, name);
    } catch (err) {
      pass.errors.push(`get pod "${name}": ${(err as Error).message}`);
      return { pod: undefined, owned: false, suspendedState: 'PodStateUnknown' };
    }
    if (!live) return { pod: undefined, owned: false, suspendedState: 'PodTerminated' };
    if (controllerOf(live)?.uid === sb.metadata.uid) {
      await this.deleteChild(pass, Pods, live, 'pod');
      return { pod: live, owned: true, suspendedState: 'PodTerminating' };
    }
    return { pod: live, owned: false, suspendedState: 'PodNotOwned', requeueAfterMs: BLOCKED_SUSPEND_RECHECK_MS };
  }

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

  // ---- Service -----------------------------------------------------------------------------------------------

  private cachedService(sb: SandboxObject): Service | undefined {
    const key = keyOf(sb);
    return this.serviceOverlay.resolve(key, this.deps.services.get(key), { whenMissing: true });
  }

  /**
   * §6.4 table (newer upstream: ports derived and reconciled when spec.service=true). Returns whether a Service is
   * in use, whether Ready must account for it, and whether it exists.
   */
  private async reconcileService(pass: Pass): Promise<{ inUse: boolean; required: boolean; exists: boolean }> {
    const { sb } = pass;
    const mode = sb.spec.service;
    const name = sb.metadata.name ?? '';
    const key = keyOf(sb);
    let svc = this.cachedService(sb);
    const none = { inUse: false, required: mode === true, exists: false };

    if (!svc) {
      if (mode !== true) return none;
      try {
        svc = await this.deps.client.create(Services, buildService(sb), { fieldManager: SANDBOX_FIELD_OWNER });
        this.serviceOverlay.remember(key, svc);
        pass.log.info({ service: name }, 'service created');
        return { inUse: true, required: true, exists: true };
      } catch (err) {
        if (!isAlreadyExists(err)) {
          pass.errors.push(`create service "${name}": ${(err as Error).message}`);
          return none;
        }
        svc = await this.liveGet<Service>(Services, sb.metadata.namespace, name);
        if (!svc) return none;
      }
    }

    const ref = controllerOf(svc);
    if (ref?.uid === sb.metadata.uid) {
      if (mode === false) {
        await this.deleteChild(pass, Services, svc, 'service');
        this.serviceOverlay.forget(key);
        return none;
      }
      await this.repairService(pass, svc);
      return { inUse: true, required: true, exists: true };
    }
    if (mode === false) return none;
    if (ref) {
      refuse(pass, foreignOwnerMessage('service', name, ref, name));
      return none;
    }
    if (mode !== true) return none; // unowned and not asked for: ignored, never adopted
    if (!isAdoptable(svc.metadata.labels, name)) {
      refuse(pass, cannotAdoptMessage('service', name));
      return none;
    }
    const clusterIP = svc.spec.clusterIP ?? '';
    if (clusterIP !== '' && clusterIP !== 'None') {
      refuse(pass, `cannot adopt service "${name}": ClusterIP is "${clusterIP}" (expected "None", field is immutable)`);
      return none;
    }
    const want = repairedService(svc, sb);
    const adopted: Service = {
      ...svc,
      metadata: {
        ...svc.metadata,
        labels: want.labels,
        ownerReferences: [...(svc.metadata.ownerReferences ?? []), sandboxOwnerRef(sb)],
      },
      spec: { ...svc.spec, selector: want.selector, ...(want.ports ? { ports: want.ports } : {}) },
    };
    try {
      const updated = await this.deps.client.update(Services, adopted, { fieldManager: SANDBOX_FIELD_OWNER });
      this.serviceOverlay.remember(key, updated);
      pass.log.info({ service: name }, 'service adopted');
      return { inUse: true, required: true, exists: true };
    } catch (err) {
      pass.errors.push(`adopt service "${name}": ${(err as Error).message}`);
      return none;
    }
  }

  private async repairService(pass: Pass, svc: Service): Promise<void> {
    const want = repairedService(svc, pass.sb);
    const diff = mergePatch(
      {
        metadata: { labels: svc.metadata.labels ?? {} },
        spec: { selector: svc.spec.selector ?? {}, ports: svc.spec.ports },
      },
      { metadata: { labels: want.labels }, spec: { selector: want.selector, ports: want.ports } },
    );
    if (!diff) return;
    try {
      const updated = await this.deps.client.patch<Service>(
        Services,
        svc.metadata.namespace,
        svc.metadata.name ?? '',
        diff,
        'merge',
        {
          fieldManager: SANDBOX_FIELD_OWNER,
        },
      );
      this.serviceOverlay.remember(keyOf(svc), updated);
    } catch (err) {
      if (!isNotFound(err)) pass.errors.push(`repair service "${svc.metadata.name}": ${(err as Error).message}`);
    }
  }

  // ---- shared ------------------------------------------------------------------------------------------------

  private async liveGet<T extends Pod | Service | PersistentVolumeClaim>(
    rt: ResourceType,
    namespace: string | undefined,
    name: string,
  ): Promise<T | undefined> {
    try {
      return await this.deps.client.get<T>(rt, namespace, name);
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
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
    const before = findCondition(sb.status?.conditions, ConditionTypes.ready);
    const after = findCondition(next.conditions, ConditionTypes.ready);
    if (after?.status === 'True' && before?.status !== 'True' && sb.metadata.creationTimestamp) {
      this.deps.onReady?.(sb, Date.parse(after.lastTransitionTime) - Date.parse(sb.metadata.creationTimestamp));
    }
    const reason = after?.reason;
    if (reason !== before?.reason) pass.log.info({ ready: after?.status, reason }, 'sandbox status changed');
  }
}
