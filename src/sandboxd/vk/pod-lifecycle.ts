/**
 * Pods bound to our virtual nodes become microVMs. One level-triggered reconciler per pod key (`<ns>/<name>`,
 * also the engine claimRef): find or make the pod's claim, report it in the Pod's status, release it when the
 * Pod goes. Pods are read from one informer per node (fieldSelector `spec.nodeName=<node>`); status is written
 * with merge patches only when it differs. A claim for the same `<ns>/<name>` is adopted, so pods keep their VMs
 * across sandboxd restarts (the engine re-attaches running VMs from its state file).
 *
 * The egress lane's VMs enforce the NetworkPolicies that select their pods (pod-network-policy.ts): one cluster-wide
 * NetworkPolicy informer; a policy's add, change or delete re-queues the pods of its namespace, and every reconcile
 * compares the layer the policies give with the one the claim's VM enforces (level-triggered, so a pod's label
 * change, a missed event or a restart converges the same way). The policies selecting a pod for Ingress give its VM's
 * ingress layer the same way: who may connect to the VM's own address, which the pod reports as its podIP.
 */
import { EventEmitter } from 'node:events';
import { isDeepStrictEqual } from 'node:util';
import type { EgressLayer, VmNetworkPolicy } from '../../api/vm-network.js';
import { CocoonAnnotationKeys } from '../../api/keys.js';
import {
  Controller,
  Events,
  Informer,
  isNotFound,
  keyOf,
  NetworkPolicies,
  Pods,
  type KubeClient,
  type KubeObject,
} from '../../kube/index.js';
import type { Logger } from '../../log/logger.js';
import type { NodeEngine, SandboxRecord } from '../engine.js';
import type { RecordHandoff } from '../placement/handoff.js';
import { PodHandoff } from './pod-handoff.js';
import { ClaimTable, type PodClaim } from './claim-table.js';
import { claimFailure, failedStatus, runningStatus, statusDiffers, vmRequestFor, waitingStatus } from './pod-spec.js';
import type { PodLogs } from './pod-logs.js';
import { podEgressLayer, podIngressLayer, type NetworkPolicy, type PodLayer } from './pod-network-policy.js';
import type { Pod, PodStatus, VirtualNodeKind } from './types.js';
import { startUpstreamSandboxd, upstreamSandboxdFor } from './upstream-sandboxd.js';

export interface VirtualNodeRef {
  name: string;
  kind: VirtualNodeKind;
}

export interface PodLifecycleOptions {
  engine: NodeEngine;
  client: KubeClient;
  nodes: readonly VirtualNodeRef[];
  hostAddress: string;
  claims: ClaimTable;
  logs: PodLogs;
  logger: Logger;
  /** How often a bound pod is looked at again (VM health, lease renewal). @default 30000 */
  resyncMs?: number;
  /**
   * Evicted Pods' sandboxes handed to their replacements (pod-handoff.ts keep, resume); absent where the node does not
   * replicate hibernation records: an evicted Pod's claim is released.
   */
  handoff?: RecordHandoff;
}

/** vk-cocoon's output annotation naming the VM (cocoon-common meta). */
export const VM_ID_ANNOTATION = 'vm.cocoonstack.io/id';

/** Renew a vk-cocoon pod's lease once less than this much is left. */
const RENEW_BELOW_MS = 12 * 3600_000;

/** The informers' index by namespace: a NetworkPolicy event re-queues its namespace's pods, a pod reads its own. */
const BY_NAMESPACE = 'namespace';

export class PodLifecycle extends EventEmitter {
  readonly informers = new Map<string, Informer<Pod>>();
  /** Every NetworkPolicy of the cluster (few, and small next to the pods; a watch, so a change applies in ms). */
  readonly policies: Informer<NetworkPolicy>;
  private readonly nodeKinds = new Map<string, VirtualNodeKind>();
  private readonly eventsSent = new Set<string>();
  /** Pods whose VM (`<claim>/<vm>`) already serves upstream sandboxd: asked once per VM, not per reconcile. */
  private readonly upstreamServed = new Map<string, string>();
  private readonly controller: Controller;
  private readonly log: Logger;
  private readonly handoff: PodHandoff | undefined;
  private readonly onReleased = (rec: SandboxRecord) => {
    if (rec.claimRef && this.opts.claims.get(rec.claimRef)) this.controller.enqueue(rec.claimRef);
  };

  constructor(private readonly opts: PodLifecycleOptions) {
    super();
    this.log = opts.logger.child({ component: 'vk-pods' });
    this.handoff =
      opts.handoff &&
      new PodHandoff(opts.engine, opts.handoff, (pod, type, reason, message) => this.event(pod, type, reason, message));
    this.controller = new Controller({
      name: 'vk-pods',
      workers: 8,
      reconcile: (req) => this.reconcile(req.key),
      logger: opts.logger,
      timeoutMs: 120_000,
    });
    for (const n of opts.nodes) {
      this.nodeKinds.set(n.name, n.kind);
      const inf = new Informer<Pod>(opts.client, Pods, {
        fieldSelector: `spec.nodeName=${n.name}`,
        logger: opts.logger,
      });
      inf.addIndex(BY_NAMESPACE, (p) => [p.metadata.namespace ?? '']);
      this.informers.set(n.name, inf);
      this.controller.for(inf);
    }
    this.policies = new Informer<NetworkPolicy>(opts.client, NetworkPolicies, { logger: opts.logger });
    this.policies.addIndex(BY_NAMESPACE, (np) => [np.metadata.namespace ?? '']);
    this.controller.watches(
      this.policies,
      (np) => this.podKeysIn(np.metadata.namespace ?? ''),
      (old, np) => old?.metadata.resourceVersion !== np.metadata.resourceVersion,
    );
  }

  private podKeysIn(namespace: string): string[] {
    return [...this.informers.values()].flatMap((inf) => inf.byIndex(BY_NAMESPACE, namespace).map((p) => keyOf(p)));
  }

  /** The Pod bound to one of our nodes, from the cache. */
  pod(namespace: string, name: string): Pod | undefined {
    for (const inf of this.informers.values()) {
      const p = inf.getByName(namespace, name);
      if (p) return p;
    }
    return undefined;
  }

  podsOf(node: string): Pod[] {
    return this.informers.get(node)?.list() ?? [];
  }

  /** The claim backing a Pod, if it has one now. */
  claimOf(pod: Pod): SandboxRecord | undefined {
    return this.opts.engine.byRef(keyOf(pod));
  }

  logFile(pod: Pod): string {
    return this.opts.logs.path(pod.metadata.namespace ?? '', pod.metadata.name ?? '', pod.metadata.uid ?? '');
  }

  async run(signal: AbortSignal): Promise<void> {
    this.opts.engine.on('released', this.onReleased);
    // A hibernate or wake (a drain, its undrain) changes the pod's readiness now, not at the next resync.
    this.opts.engine.on('changed', this.onReleased);
    // The policies are synced before any pod is: a VM is never handed to a pod with less filtering than its policies.
    const all = [...this.informers.values(), this.policies];
    const informers = all.map((inf) => inf.start(signal));
    await Promise.all(all.map((inf) => inf.synced()));
    // Pods deleted while we were down: their claims are in the table but no informer has them.
    for (const row of this.opts.claims.list()) if (!this.pod(...splitPodKey(row.pod))) this.controller.enqueue(row.pod);
    const resync = setInterval(() => {
      for (const inf of this.informers.values()) inf.resync();
    }, this.opts.resyncMs ?? 30_000);
    // VM health is in memory: look every 2 s, so a crashed VM flips its Pod un-Ready (and is replaced) quickly.
    const health = setInterval(() => this.checkVms(), 2000);
    this.emit('synced');
    try {
      await Promise.all([this.controller.run(signal), ...informers]);
    } finally {
      clearInterval(resync);
      clearInterval(health);
      this.opts.engine.off('released', this.onReleased);
      this.opts.engine.off('changed', this.onReleased);
    }
  }

  /** Enqueue pods whose claim vanished or whose VM is not running. */
  checkVms(): void {
    for (const row of this.opts.claims.list()) {
      let state = 'destroyed';
      try {
        state = this.opts.engine.vm(row.claimId).state;
      } catch {
        // claim or VM gone
      }
      if (state !== 'running') this.controller.enqueue(row.pod);
    }
  }

  private async reconcile(key: string): Promise<{ requeueAfterMs?: number } | void> {
    const [namespace, name] = splitPodKey(key);
    const { engine, claims } = this.opts;
    const pod = this.pod(namespace, name);
    const row = claims.get(key);
    const log = this.log.child({ pod: key });

    if (!pod) {
      if (row) {
        await this.release(row, 'the pod is gone', log);
        this.opts.logs.remove(this.opts.logs.path(namespace, name, row.uid));
      }
      return;
    }
    const kind = this.nodeKinds.get(pod.spec.nodeName ?? '') ?? 'sandboxd';
    const logFile = this.logFile(pod);

    if (pod.metadata.deletionTimestamp) {
      if (row && (await this.handoff?.keep(pod, row.claimId, log))) {
        claims.delete(key);
        this.opts.logs.event(
          logFile,
          'pod evicted while the node drains; its microVM is kept hibernated for the replacement Pod',
        );
      } else {
        if (row) await this.release(row, 'the pod is being deleted', log);
        this.opts.logs.event(logFile, 'pod deleted; microVM destroyed');
      }
      try {
        await this.opts.client.delete(Pods, namespace, name, {
          gracePeriodSeconds: 0,
          preconditions: { uid: pod.metadata.uid },
        });
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
      this.opts.logs.remove(logFile);
      return;
    }

    const phase = pod.status?.phase;
    if (phase === 'Failed' || phase === 'Succeeded') {
      if (row) await this.release(row, `the pod is ${phase}`, log);
      return;
    }

    const asked = vmRequestFor(pod, kind, engine.knownTemplates());
    if (!asked.ok) {
      this.event(pod, 'Warning', asked.reason, asked.message);
      await this.writeStatus(pod, waitingStatus(pod, asked.reason, asked.message, now()));
      return;
    }
    const { request } = asked;
    const policies = request.key.net === 'egress' ? this.policies.byIndex(BY_NAMESPACE, namespace) : undefined;
    const layers = policies && { egress: podEgressLayer(pod, policies), ingress: podIngressLayer(pod, policies) };

    let rec = engine.byRef(key);
    let restartCount = row?.restartCount ?? 0;
    if (!rec && row) {
      // Our claim went away without the pod going: lease expiry, a release through the node API, or the VM died
      // while sandboxd was down. A sandboxd pod fails (its lease is the contract); a vk-cocoon pod gets a new VM.
      if (kind === 'sandboxd') {
        const expired = Date.parse(row.deadline) <= Date.now();
        const reason = expired ? 'SandboxLeaseExpired' : 'SandboxGone';
        const message = expired
          ? `the sandbox lease of claim ${row.claimId} ended at ${row.deadline}`
          : `claim ${row.claimId} no longer exists on this node (released through the node API, or its VM stopped)`;
        this.opts.logs.event(logFile, message);
        await this.writeStatus(pod, failedStatus(pod, reason, message, now()));
        claims.delete(key);
        return;
      }
      restartCount++;
      this.event(pod, 'Warning', 'VMGone', `the microVM of claim ${row.claimId} is gone; starting a new one`);
      this.opts.logs.event(
        logFile,
        `microVM of claim ${row.claimId} is gone; starting a new one (restart ${restartCount})`,
      );
    }

    if (!rec && !row && this.handoff)
      rec = await this.handoff.resume(
        pod,
        key,
        {
          ...(request.ttlSeconds ? { ttlSeconds: request.ttlSeconds } : {}),
          ...(request.idleHibernateSeconds ? { idleHibernateSeconds: request.idleHibernateSeconds } : {}),
          ...(layers ? { network: (inherited: VmNetworkPolicy | undefined) => withLayers(inherited, layers) } : {}),
        },
        log,
      );
    if (!rec) {
      const network = layers && withLayers(undefined, layers);
      try {
        // A pod's VM mostly waits in a warm pool for a SandboxClaim: prime it, so the claimer's first exec is fast.
        rec = await engine.claim({
          key: request.key,
          ttlSeconds: request.ttlSeconds,
          claimRef: key,
          primeAfter: true,
          ...(request.idleHibernateSeconds ? { idleHibernateSeconds: request.idleHibernateSeconds } : {}),
          ...(network ? { network } : {}),
        });
      } catch (err) {
        const f = claimFailure(err);
        log.warn({ err, reason: f.reason }, 'could not get a microVM for the pod');
        this.event(pod, 'Warning', f.reason, f.message);
        await this.writeStatus(pod, waitingStatus(pod, f.reason, f.message, now()));
        return f.retry ? { requeueAfterMs: 5000 } : undefined;
      }
      try {
        claims.set(this.row(pod, kind, rec, restartCount));
      } catch (err) {
        await engine.release(rec.id).catch(() => undefined);
        throw err;
      }
      this.opts.logs.event(
        logFile,
        `pod bound to microVM ${rec.vmId} (claim ${rec.id}, template ${rec.key.template}, ${rec.source})`,
      );
      log.info({ sandbox: rec.id, vm: rec.vmId, source: rec.source }, 'pod bound to a microVM');
      this.event(
        pod,
        'Normal',
        'Started',
        `microVM ${rec.vmId} (claim ${rec.id}, ${rec.source}) runs ${rec.key.template}`,
      );
    } else if (!row || row.claimId !== rec.id || row.uid !== pod.metadata.uid) {
      claims.set(this.row(pod, kind, rec, restartCount));
      this.opts.logs.event(logFile, `adopted microVM ${rec.vmId} (claim ${rec.id})`);
      log.info({ sandbox: rec.id, vm: rec.vmId }, 'pod adopted an existing claim');
      if (rec.handedOff) {
        // The replacement of an evicted Pod landed back here (the node was uncordoned): it takes the kept VM back.
        engine.setHandedOff(rec.id, false);
        if (rec.hibernated && !engine.draining) await engine.wake(rec.id);
      }
    }

    let vmState: string;
    /** The VM's own address on a networked VM (its namespace's, DNAT'd to the guest); NIC-less VMs have none. */
    let podAddress: string | undefined;
    try {
      const vm = engine.vm(rec.id);
      vmState = vm.state;
      podAddress = vm.record.netns?.nsAddress;
    } catch {
      vmState = 'destroyed';
    }
    if (vmState === 'failed' || vmState === 'destroyed') {
      log.warn({ sandbox: rec.id, state: vmState }, "the pod's microVM stopped; releasing its claim");
      await engine.release(rec.id).catch(() => undefined);
      return { requeueAfterMs: 0 };
    }

    if (layers) await this.enforcePolicies(pod, rec, layers, log);

    // The idle policy follows the Pod: a warm pool member's starts when a claim adopts it (pod-spec.ts).
    if (rec.idleHibernateSeconds !== request.idleHibernateSeconds) {
      engine.setIdlePolicy(rec.id, request.idleHibernateSeconds);
      log.info({ sandbox: rec.id, idleHibernateSeconds: request.idleHibernateSeconds }, 'idle policy set from the pod');
    }

    if (request.renew && Date.parse(rec.deadline) - Date.now() < RENEW_BELOW_MS) {
      engine.renew(rec.id, request.ttlSeconds ?? 0);
    }
    const current = claims.get(key);
    if (current && current.deadline !== rec.deadline) claims.set({ ...current, deadline: rec.deadline });

    await this.annotate(pod, kind, rec);
    let ready = vmState === 'running';
    let notReady: { reason: string; message: string } | undefined = ready
      ? undefined
      : { reason: vmState, message: `the microVM is ${vmState}` };
    // Ready promises the SDKs a listening upstream sandboxd when the pod asks for one: they never probe first.
    const upstream = ready ? upstreamSandboxdFor(pod) : undefined;
    const served = `${rec.id}/${rec.vmId}`;
    if (upstream && this.upstreamServed.get(key) !== served) {
      try {
        await startUpstreamSandboxd(engine.vm(rec.id), upstream);
        this.upstreamServed.set(key, served);
        this.opts.logs.event(logFile, 'upstream sandboxd listening on 8080 (REST) and 9090 (gRPC)');
      } catch (err) {
        const message = `upstream sandboxd did not start: ${err instanceof Error ? err.message : String(err)}`;
        log.warn({ err }, 'upstream sandboxd did not start');
        this.event(pod, 'Warning', 'UpstreamSandboxdFailed', message);
        ready = false;
        notReady = { reason: 'UpstreamSandboxdFailed', message };
      }
    }
    await this.writeStatus(
      pod,
      runningStatus(pod, {
        claimId: rec.id,
        hostAddress: this.opts.hostAddress,
        ...(podAddress ? { podAddress } : {}),
        ready,
        restartCount,
        now: now(),
        ...(notReady ? { notReadyReason: notReady.reason, notReadyMessage: notReady.message } : {}),
      }),
    );
    if (notReady?.reason === 'UpstreamSandboxdFailed') return { requeueAfterMs: 5000 };
    if (kind === 'sandboxd') {
      const left = Date.parse(rec.deadline) - Date.now();
      if (left < (this.opts.resyncMs ?? 30_000)) return { requeueAfterMs: Math.max(0, left) + 1100 };
    }
    return;
  }

  /**
   * Bring the template and ingress layers of the pod's VM to what its NetworkPolicies give (the tenant layer, set
   * through the node API, is kept). A failure throws: the reconcile is retried, and the VM keeps what it enforced before.
   */
  private async enforcePolicies(pod: Pod, rec: SandboxRecord, layers: PodLayers, log: Logger): Promise<void> {
    for (const [direction, l] of Object.entries(layers))
      if (l.dropped)
        this.event(
          pod,
          'Warning',
          'NetworkPolicyTruncated',
          `${l.dropped} ${direction} rules of ${l.policies.join(', ')} are not enforced on the microVM (an invalid CIDR, or past the limit of rules): the traffic they would allow is denied`,
        );
    const { egress, ingress } = layers;
    if (
      isDeepStrictEqual(rec.network?.template, egress.layer) &&
      isDeepStrictEqual(rec.network?.ingress, ingress.layer)
    )
      return;
    await this.opts.engine.setNetworkPolicy(rec.id, (current) => withLayers(current, layers));
    const what = egress.layer ? egress.layer.source : 'no NetworkPolicy selects the pod: the secure default';
    const from = ingress.layer ? ingress.layer.source : 'no NetworkPolicy selects the pod: every peer';
    log.info({ sandbox: rec.id, egress: egress.policies, ingress: ingress.policies }, 'policy applied to the microVM');
    this.opts.logs.event(this.logFile(pod), `egress policy of microVM ${rec.vmId}: ${what}; ingress: ${from}`);
  }

  /**
   * Output annotations (docs/runtime-adapter.md "Node side: what each runtime's node promises"): the claim id, and for
   * vk-cocoon the VM id; patched only on change.
   */
  private async annotate(pod: Pod, kind: VirtualNodeKind, rec: SandboxRecord): Promise<void> {
    const want: Record<string, string> = { [CocoonAnnotationKeys.claimId]: rec.id };
    if (kind === 'vk-cocoon') want[VM_ID_ANNOTATION] = rec.vmId;
    const have = pod.metadata.annotations ?? {};
    if (Object.entries(want).every(([k, v]) => have[k] === v)) return;
    try {
      await this.opts.client.patch<Pod>(
        Pods,
        pod.metadata.namespace,
        pod.metadata.name ?? '',
        { metadata: { annotations: want } },
        'merge',
      );
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
  }

  /**
   * A core/v1 Event on the Pod (what `kubectl describe pod` shows), once per pod incarnation and reason+message;
   * best effort, never in the way of the reconcile.
   */
  private event(pod: Pod, type: 'Normal' | 'Warning', reason: string, message: string): void {
    const seenKey = `${pod.metadata.uid ?? ''}|${reason}|${message}`;
    if (this.eventsSent.has(seenKey)) return;
    this.eventsSent.add(seenKey);
    if (this.eventsSent.size > 10_000) this.eventsSent.clear();
    const ts = new Date().toISOString();
    const ev: KubeObject & Record<string, unknown> = {
      apiVersion: 'v1',
      kind: 'Event',
      metadata: { generateName: `${pod.metadata.name ?? 'pod'}.`, namespace: pod.metadata.namespace },
      involvedObject: {
        apiVersion: 'v1',
        kind: 'Pod',
        name: pod.metadata.name,
        namespace: pod.metadata.namespace,
        uid: pod.metadata.uid,
      },
      type,
      reason,
      message,
      source: { component: 'sandboxd-virtual-kubelet', host: pod.spec.nodeName },
      firstTimestamp: ts,
      lastTimestamp: ts,
      count: 1,
    };
    this.opts.client.create(Events, ev).catch((err: unknown) => this.log.debug({ err }, 'could not record an event'));
  }

  private row(pod: Pod, kind: VirtualNodeKind, rec: SandboxRecord, restartCount: number): PodClaim {
    return {
      pod: keyOf(pod),
      uid: pod.metadata.uid ?? '',
      node: pod.spec.nodeName ?? '',
      kind,
      claimId: rec.id,
      vmId: rec.vmId,
      deadline: rec.deadline,
      restartCount,
      boundAt: now(),
    };
  }

  private async release(row: PodClaim, why: string, log: Logger): Promise<void> {
    const rec = this.opts.engine.get(row.claimId);
    if (rec) {
      log.info({ sandbox: row.claimId, why }, "releasing the pod's microVM");
      await this.opts.engine.release(row.claimId);
    }
    this.opts.claims.delete(row.pod);
    this.upstreamServed.delete(row.pod);
  }

  private async writeStatus(pod: Pod, want: PodStatus): Promise<void> {
    if (!statusDiffers(pod.status, want)) return;
    try {
      await this.opts.client.patch<Pod>(
        Pods,
        pod.metadata.namespace,
        pod.metadata.name ?? '',
        { status: want },
        'merge',
        {
          subresource: 'status',
        },
      );
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
  }
}

function now(): string {
  return new Date().toISOString().replace(/\.\d{3}Z$/, 'Z');
}

/** What the NetworkPolicies selecting a pod give its VM. */
interface PodLayers {
  egress: PodLayer;
  ingress: PodLayer;
}

/**
 * `current` with its template and ingress layers replaced by the policies' (an absent one removed: the secure default,
 * every peer); undefined when no layer is left.
 */
function withLayers(current: VmNetworkPolicy | undefined, layers: PodLayers): VmNetworkPolicy | undefined {
  const next: VmNetworkPolicy = { ...current };
  const set = (name: 'template' | 'ingress', layer: EgressLayer | undefined) => {
    if (layer) next[name] = layer;
    else delete next[name];
  };
  set('template', layers.egress.layer);
  set('ingress', layers.ingress.layer);
  return next.template || next.tenant || next.ingress ? next : undefined;
}

export function splitPodKey(key: string): [string, string] {
  const i = key.indexOf('/');
  return [key.slice(0, i), key.slice(i + 1)];
}
