/**
 * The virtual kubelet's half of `kubectl drain` keeping a Sandbox's state (docs/virtual-kubelet.md "Draining the
 * node"): on the draining node, an evicted Sandbox Pod's claim is kept hibernated for its replacement (`keep`); on
 * the node the replacement lands on, it resumes from the kept claim's hibernation record (`resume`), found by the
 * Pod's key through placement/handoff.ts.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { VmNetworkPolicy } from '../../api/vm-network.js';
import { controllerOf } from '../../kube/index.js';
import type { Logger } from '../../log/logger.js';
import type { NodeEngine, SandboxRecord } from '../engine.js';
import type { RecordHandoff } from '../placement/handoff.js';
import type { Pod } from './types.js';

/** How long an eviction from a draining node waits for the drain to hibernate its sandbox and publish the record. */
const HANDOFF_WAIT_MS = 90_000;
/**
 * How long an eviction waits for the node to start draining: `kubectl drain` cordons the Node and then evicts at
 * once, and the eviction can reach this kubelet's pod informer before the cordon reaches its Node watch (CI saw the
 * Pod's deletion first). An eviction with no drain behind it (a descheduler's) is released after this.
 */
const DRAIN_NOTICE_MS = 10_000;

type PodEvent = (pod: Pod, type: 'Normal' | 'Warning', reason: string, message: string) => void;

/** Only a Sandbox's Pod is made again under the same name (its key is the claim_ref both claims share). */
const replacedBySandbox = (pod: Pod) => controllerOf(pod)?.kind === 'Sandbox';

/**
 * Deleted through the Eviction API (`kubectl drain`): the apiserver marks the Pod `DisruptionTarget` /
 * `EvictionByEvictionAPI` before it deletes it. A plain delete (of the Pod, or of its Sandbox, whose Pod the garbage
 * collector then deletes) has no such condition, and its sandbox is released as always: nothing would replace it.
 */
const evicted = (pod: Pod) =>
  pod.status?.conditions?.some(
    (c) => c.type === 'DisruptionTarget' && c.status === 'True' && c.reason === 'EvictionByEvictionAPI',
  ) === true;

export class PodHandoff {
  constructor(
    private readonly engine: NodeEngine,
    private readonly records: RecordHandoff,
    private readonly event: PodEvent,
  ) {}

  /**
   * Pod `pod` (claim `claimId`) is being evicted: keep its claim hibernated with its hibernation record published,
   * for the replacement Pod to resume on the node it lands on, instead of releasing it. Waits for the drain to
   * hibernate it and for the record; false (release, as on any delete) when the Pod was deleted rather than evicted or
   * has no Sandbox to replace it, the node does not start draining within DRAIN_NOTICE_MS (or stops), or the record
   * is not there within HANDOFF_WAIT_MS.
   */
  async keep(pod: Pod, claimId: string, log: Logger): Promise<boolean> {
    const { engine } = this;
    if (!replacedBySandbox(pod) || !evicted(pod)) return false;
    const started = Date.now();
    for (;;) {
      const rec = engine.get(claimId);
      if (!rec) return false;
      if (!engine.draining) {
        if (Date.now() - started < DRAIN_NOTICE_MS) {
          await sleep(100);
          continue;
        }
        log.info({ sandbox: rec.id }, 'pod evicted, but its node is not draining; releasing its sandbox');
        return false;
      }
      if (rec.hibernated && rec.hibernationCheckpoint) {
        engine.setHandedOff(rec.id, true);
        await engine.saveState();
        log.info(
          { sandbox: rec.id, checkpoint: rec.hibernationCheckpoint },
          'pod evicted from a draining node: its sandbox is kept hibernated for the replacement Pod',
        );
        return true;
      }
      if (Date.now() - started > HANDOFF_WAIT_MS) {
        log.warn(
          { sandbox: rec.id, hibernated: rec.hibernated },
          'pod evicted from a draining node, but its hibernation record is not published; releasing it',
        );
        return false;
      }
      await sleep(200);
    }
  }

  /**
   * A new Pod of a Sandbox whose previous Pod was evicted from a draining node (`keep`): resume the sandbox from its
   * hibernation record, held here or on a peer, so the Pod gets its predecessor's files, memory and processes.
   * Undefined (a fresh VM follows) when there is no record, or the resume failed (said in a Warning Event).
   */
  async resume(
    pod: Pod,
    key: string,
    opts: {
      ttlSeconds?: number;
      idleHibernateSeconds?: number;
      network?: (inherited: VmNetworkPolicy | undefined) => VmNetworkPolicy | undefined;
    },
    log: Logger,
  ): Promise<SandboxRecord | undefined> {
    if (!replacedBySandbox(pod)) return undefined;
    const found = await this.records.find(key).catch((err: unknown) => {
      log.warn({ err }, 'looking for a hibernation record of the pod failed; it gets a fresh VM');
      return undefined;
    });
    if (!found) return undefined;
    try {
      const rec = await this.records.claim(found, opts);
      const from = `${found.origin ? `node ${found.origin}'s ` : ''}hibernation record ${found.id}`;
      const where = found.holders.length ? `fetched from a peer, ${found.holders[0]}` : 'held here';
      log.info(
        { sandbox: rec.id, checkpoint: found.id, pulled: found.holders.length > 0 },
        'pod resumed its predecessor',
      );
      this.event(
        pod,
        'Normal',
        'SandboxResumedFromRecord',
        `the evicted Pod's sandbox resumed here from ${from} (${where})`,
      );
      return rec;
    } catch (err) {
      log.warn(
        { err, checkpoint: found.id },
        'resuming the pod from its hibernation record failed; it gets a fresh VM',
      );
      this.event(
        pod,
        'Warning',
        'SandboxRecordResumeFailed',
        `resuming from hibernation record ${found.id} failed (${err instanceof Error ? err.message : String(err)}); starting a fresh VM`,
      );
      return undefined;
    }
  }
}
