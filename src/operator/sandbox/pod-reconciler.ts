/**
 * A Sandbox's Pod: found by controller UID (authoritative), else created, adopted (unowned and adoptable) or refused
 * (someone else's) under its name; its metadata re-synced (never its spec); deleted on suspend, owned Pods only.
 */
import { SANDBOX_FIELD_OWNER } from '../../api/index.js';
import {
  controllerOf,
  isAlreadyExists,
  isNotFound,
  mergePatch,
  Pods,
  type Informer,
  type KubeClient,
} from '../../kube/index.js';
import type { RuntimeName } from '../runtime/adapter.js';
import type { SandboxEvents } from './events.js';
import { ConditionTypes, findCondition, type SuspendedState } from './conditions.js';
import {
  buildPod,
  cannotAdoptMessage,
  foreignOwnerMessage,
  isAdoptable,
  podNameOf,
  sandboxOwnerRef,
  syncedPodMetadata,
} from './desired.js';
import { isNewer } from './overlay.js';
import { ChildReconciler, deleteChild, liveGet, refuse, type Pass } from './pass.js';
import type { Pod, SandboxObject } from './types.js';

/** Pods indexed by the UID of their controlling Sandbox. */
export const POD_OWNER_INDEX = 'sandbox:controller-uid';

/** How often a suspension blocked by a Pod the caches cannot see is re-checked. */
const BLOCKED_SUSPEND_RECHECK_MS = 5_000;

export interface PodOutcome {
  pod: Pod | undefined;
  owned: boolean;
  suspendedState?: SuspendedState;
  multiple?: number;
  requeueAfterMs?: number;
}

/** Sets (or with undefined, removes) the Sandbox's pod-name annotation, only if it differs. */
export type PodNameAnnotator = (pass: Pass, podName: string | undefined) => Promise<void>;

/** How long a write that can wait (keyed by Sandbox UID) should wait for claims in flight; 0 = now. */
export type Hold = (key: string) => number;

/** Its overlay is keyed by Sandbox UID: the Pods we created or adopted, until the pod cache has them. */
export class PodReconciler extends ChildReconciler<Pod> {
  constructor(
    client: KubeClient,
    pods: Informer<Pod>,
    private readonly defaultRuntime: RuntimeName,
    private readonly setPodNameAnnotation: PodNameAnnotator,
    private readonly events: SandboxEvents,
    private readonly hold: Hold = () => 0,
  ) {
    super(client, pods);
  }

  /** Drop the read-your-writes entry of a Sandbox (by UID) that is gone. */
  forget(sandboxUid: string): void {
    this.overlay.forget(sandboxUid);
  }

  /** Drop read-your-writes state for a Pod that is gone (called from the pod informer). */
  podDeleted(pod: Pod): void {
    const ref = controllerOf(pod);
    if (ref) this.overlay.forget(ref.uid);
  }

  /** Pods controlled by this Sandbox (ownership by UID is authoritative), including one we just wrote. */
  ownedPods(sb: SandboxObject): Pod[] {
    const uid = sb.metadata.uid ?? '';
    const cached = this.cache.byIndex(POD_OWNER_INDEX, uid);
    const written = this.overlay.peek(uid);
    if (!written) return cached;
    const i = cached.findIndex((p) => p.metadata.uid === written.metadata.uid);
    if (i < 0) return [...cached, written];
    if (isNewer(written, cached[i]!)) return cached.map((p, j) => (j === i ? written : p));
    this.overlay.forget(uid);
    return cached;
  }

  async reconcile(pass: Pass): Promise<PodOutcome> {
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
    let pod = this.cache.getByName(sb.metadata.namespace, name);
    if (!pod) {
      let desired: Pod;
      try {
        desired = buildPod(sb, name, this.defaultRuntime);
      } catch (err) {
        refuse(pass, `mutate sandbox pod: ${(err as Error).message}`);
        return { pod: undefined, owned: false };
      }
      try {
        pod = await this.client.create(Pods, desired, { fieldManager: SANDBOX_FIELD_OWNER });
        this.overlay.remember(sb.metadata.uid ?? '', pod);
        pass.log.info({ pod: name }, 'pod created');
        this.events.podCreated(sb, name);
        await this.setPodNameAnnotation(pass, name);
        return { pod, owned: true };
      } catch (err) {
        if (!isAlreadyExists(err)) {
          pass.errors.push(`create pod "${name}": ${(err as Error).message}`);
          this.events.podCreateFailed(sb, name, (err as Error).message);
          return { pod: undefined, owned: false };
        }
        // Rare path: a Pod the filtered cache cannot see (no name-hash label) holds the name.
        pod = await liveGet<Pod>(this.client, Pods, sb.metadata.namespace, name);
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
    if (!adopt) {
      // A metadata re-sync of an existing Pod (after a claim adopted its Sandbox, typically) changes nothing the Pod
      // runs with: it waits while claims are in flight, so it does not compete with their writes.
      const held = this.hold(sb.metadata.uid ?? '');
      if (held > 0) {
        pass.heldMs = Math.min(pass.heldMs ?? Infinity, held);
        return pod;
      }
    }
    const metadata: Record<string, unknown> = { ...(diff ?? {}) };
    if (adopt) {
      // The list replaces the one we read, so the write is guarded by the version we read: an owner set since then
      // makes it fail with 409 instead of being overwritten, and the next pass sees that owner and refuses.
      metadata.ownerReferences = [...(pod.metadata.ownerReferences ?? []), sandboxOwnerRef(sb)];
      metadata.resourceVersion = pod.metadata.resourceVersion;
    }
    try {
      const updated = await this.client.patch<Pod>(
        Pods,
        pod.metadata.namespace,
        pod.metadata.name ?? '',
        { metadata },
        'merge',
        {
          fieldManager: SANDBOX_FIELD_OWNER,
        },
      );
      this.overlay.remember(sb.metadata.uid ?? '', updated);
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
      for (const pod of owned) await deleteChild(this.client, pass, Pods, pod, 'pod');
      return { pod: owned[0], owned: true, suspendedState: pass.errors.length ? 'PodStateUnknown' : 'PodTerminating' };
    }
    const name = podNameOf(sb);
    const cached = this.cache.getByName(sb.metadata.namespace, name);
    if (cached) {
      pass.log.info({ pod: name }, 'not deleting a pod this sandbox does not own');
      return { pod: cached, owned: false, suspendedState: 'PodNotOwned' };
    }
    const suspended = findCondition(sb.status?.conditions, ConditionTypes.suspended);
    if (suspended?.status === 'True') return { pod: undefined, owned: false, suspendedState: 'PodTerminated' };
    // Not yet confirmed: the filtered cache cannot see an unlabeled Pod holding the name, so look once.
    let live: Pod | undefined;
    try {
      live = await liveGet<Pod>(this.client, Pods, sb.metadata.namespace, name);
    } catch (err) {
      pass.errors.push(`get pod "${name}": ${(err as Error).message}`);
      return { pod: undefined, owned: false, suspendedState: 'PodStateUnknown' };
    }
    if (!live) return { pod: undefined, owned: false, suspendedState: 'PodTerminated' };
    if (controllerOf(live)?.uid === sb.metadata.uid) {
      await deleteChild(this.client, pass, Pods, live, 'pod');
      return { pod: live, owned: true, suspendedState: 'PodTerminating' };
    }
    return { pod: live, owned: false, suspendedState: 'PodNotOwned', requeueAfterMs: BLOCKED_SUSPEND_RECHECK_MS };
  }
}
