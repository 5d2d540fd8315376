import { setTimeout as sleep } from 'node:timers/promises';
import { CocoonAnnotationKeys } from '../api/keys.js';
import { API_VERSION } from '../api/scheme.js';
import { kubeTime, type CheckpointSummary } from '../api/index.js';
import { NodeInventories, type KubeClient } from '../kube/index.js';
import { silentLogger, type Logger } from '../log/logger.js';
import type { NodeEngine } from './engine.js';
import { phaseOf } from './claims.js';

/**
 * Publishes this node's NodeInventory (docs/sandboxd-api.md "NodeInventory"): the only per-node object in etcd. One
 * server-side apply of the whole object per interval (field manager `sandboxd`, force), rebuilt from live state each
 * time, which is also the recovery for a deleted object. Skipped when nothing changed since the last publish.
 */
export interface InventoryOptions {
  client: KubeClient;
  engine: NodeEngine;
  nodeName: string;
  address: string;
  intervalMs?: number;
  logger?: Logger;
  /** The replicator's counts, when this node keeps copies (--checkpoint-replicas > 1). */
  replication?: ReplicationSummary;
}

/** What NodeInventory's `checkpoints` says about copies (Replicator.summary). */
export interface ReplicationSummary {
  summary(): { replicas: number; counted: number; underReplicated: number };
}

/**
 * The most `entries` one NodeInventory lists. Nothing reads them to serve sandboxes (sandbox-apiserver reads the
 * nodes' change feeds); uncapped, a node's object grows ~170 B per claim and passes etcd's 1.5 MiB request limit
 * near 9 000 claims, while every publish rewrites it whole (PERFORMANCE.md "Fleet scale"). Past the cap the first
 * ones by name are kept and an annotation says how many of how many.
 */
export const INVENTORY_MAX_ENTRIES = 1000;

/**
 * The `checkpoints` summary: how many this node holds and, when it counts copies, how many it counted and how many
 * were short. Without a replicator (replicas 1) nothing counts, so those two are absent, not zero.
 */
export function checkpointSummary(held: number, replication: ReplicationSummary | undefined): CheckpointSummary {
  if (!replication) return { held, replicas: 1 };
  const { replicas, counted, underReplicated } = replication.summary();
  return { held, replicas, counted, underReplicated };
}

export function buildInventory(
  engine: NodeEngine,
  nodeName: string,
  address: string,
  replication?: ReplicationSummary,
) {
  const all = engine
    .list()
    .map((r) => ({
      name: r.claimRef ?? r.id,
      id: r.id,
      phase: phaseOf(r),
      ...(r.claimRef ? { claimRef: r.claimRef } : {}),
      addr: address,
      deadline: kubeTime(r.deadline),
    }))
    .sort((a, b) => a.name.localeCompare(b.name));
  const entries = all.length > INVENTORY_MAX_ENTRIES ? all.slice(0, INVENTORY_MAX_ENTRIES) : all;
  const sim = engine.driver.simulation;
  const annotations = {
    ...(sim ? { [CocoonAnnotationKeys.simulation]: sim.note } : {}),
    ...(engine.draining ? { [CocoonAnnotationKeys.draining]: engine.draining.summary() } : {}),
    ...(entries.length < all.length
      ? {
          [CocoonAnnotationKeys.inventoryEntries]: `${entries.length} of ${all.length} (capped; the node's change feed has every claim)`,
        }
      : {}),
  };
  const pools = engine
    .poolStatus()
    .map((p) => ({ template: p.key.template, net: p.key.net, size: p.key.size, warm: p.warm, target: p.target }))
    .sort((a, b) => `${a.template}|${a.net}|${a.size}`.localeCompare(`${b.template}|${b.net}|${b.size}`));
  return {
    apiVersion: API_VERSION.NodeInventory,
    kind: 'NodeInventory',
    metadata: { name: nodeName, ...(Object.keys(annotations).length ? { annotations } : {}) },
    node: nodeName,
    address,
    entries,
    pools,
    checkpoints: checkpointSummary(engine.checkpointStore.list().length, replication),
  };
}

export class InventoryPublisher {
  private last = '';
  readonly stats = { publishes: 0, skipped: 0, failures: 0 };
  private readonly log: Logger;

  constructor(private readonly opts: InventoryOptions) {
    this.log = (opts.logger ?? silentLogger).child({ component: 'inventory' });
  }

  async publishOnce(force = false): Promise<boolean> {
    const obj = buildInventory(this.opts.engine, this.opts.nodeName, this.opts.address, this.opts.replication);
    const body = JSON.stringify(obj);
    if (!force && body === this.last) {
      this.stats.skipped++;
      return false;
    }
    await this.opts.client.patch(NodeInventories, undefined, this.opts.nodeName, body, 'apply', {
      fieldManager: 'sandboxd',
      force: true,
    });
    this.last = body;
    this.stats.publishes++;
    return true;
  }

  async run(signal: AbortSignal): Promise<void> {
    let beats = 0;
    while (!signal.aborted) {
      try {
        // Re-assert the whole object every 10th beat even if unchanged (recovers a deleted object).
        await this.publishOnce(beats++ % 10 === 0);
      } catch (err) {
        this.stats.failures++;
        this.log.warn({ err }, 'publishing NodeInventory failed; retrying next interval');
      }
      await sleep(this.opts.intervalMs ?? 30_000, undefined, { signal }).catch(() => {});
    }
  }
}
