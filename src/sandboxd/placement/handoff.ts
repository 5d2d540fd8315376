/**
 * A replacement Pod's sandbox from its predecessor's hibernation record (docs/virtual-kubelet.md "Draining the
 * node"): when `kubectl drain` evicts a Sandbox's Pod from a draining node, that node keeps the claim hibernated and
 * its record published (vk/pod-lifecycle.ts hands it off); the Sandbox controller makes a new Pod of the same name,
 * the scheduler puts it on another node, and that node's virtual kubelet finds the record by the Pod's key (the
 * claim_ref both claims share) here: held on this node (a replica), or listed by a peer (`GET /v1/checkpoints
 * ?kind=hibernation&claim_ref=`), pulled and claimed. The claim names the one it replaces (`resumedFrom`), and the
 * record is consumed as any resume-elsewhere consumes it: dropped here and on the peers, whereupon the old node
 * releases the handed-off claim (engine.deleteCheckpoint).
 */
import type { Logger } from '../../log/logger.js';
import type { VmNetworkPolicy } from '../../api/vm-network.js';
import type { NodeEngine, SandboxRecord } from '../engine.js';
import type { Healer } from './heal.js';
import type { PeerClient } from './peer-client.js';
import { CHECKPOINT_ID } from './record.js';

/** A hibernation record of one sandbox, and where it is: here (no holders) or on these peers. */
export interface FoundRecord {
  id: string;
  claimRef: string;
  /** The claim it was taken of, on `origin` (the node that took it; a holder's copy names it, the origin does not). */
  sandboxId: string;
  origin?: string;
  holders: string[];
}

export interface RecordHandoffOptions {
  engine: NodeEngine;
  client: PeerClient;
  peers: () => string[];
  self: () => string;
  /** Pulls a record held only by peers; absent: only a record already held here is resumed. */
  puller?: Healer;
  logger: Logger;
  /** Per peer asked. @default 2000 */
  timeoutMs?: number;
}

interface ListedRow {
  id?: unknown;
  claim_ref?: unknown;
  sandbox_id?: unknown;
  origin?: unknown;
  kind?: unknown;
}

export class RecordHandoff {
  constructor(private readonly o: RecordHandoffOptions) {}

  /** The hibernation record of claim_ref `ref`, held here or by peers (asked in parallel); undefined if none. */
  async find(ref: string): Promise<FoundRecord | undefined> {
    const local = this.o.engine.listCheckpoints().find((ck) => ck.kind === 'hibernation' && ck.claimRef === ref);
    if (local)
      return {
        id: local.id,
        claimRef: ref,
        sandboxId: local.sandboxId,
        ...(local.origin ? { origin: local.origin } : {}),
        holders: [],
      };
    const self = this.o.self();
    const path = `/v1/checkpoints?kind=hibernation&claim_ref=${encodeURIComponent(ref)}`;
    const answers = await Promise.all(
      this.o
        .peers()
        .filter((peer) => peer !== self)
        .map(async (peer) => {
          try {
            const body = (await this.o.client.json(peer, path, this.o.timeoutMs ?? 2000)) as {
              checkpoints?: ListedRow[];
            };
            const row = (body.checkpoints ?? []).find((c) => c.kind === 'hibernation' && c.claim_ref === ref);
            // A peer's answer is input like any other: an id that is not a checkpoint id is no record.
            return row && typeof row.id === 'string' && CHECKPOINT_ID.test(row.id) && typeof row.sandbox_id === 'string'
              ? {
                  peer,
                  id: row.id,
                  sandboxId: row.sandbox_id,
                  ...(typeof row.origin === 'string' ? { origin: row.origin } : {}),
                }
              : undefined;
          } catch (err) {
            this.o.logger.debug({ err, peer, claimRef: ref }, 'a peer did not answer the hibernation record lookup');
            return undefined;
          }
        }),
    );
    const held = answers.filter((a): a is NonNullable<typeof a> => a !== undefined);
    if (!held.length) return undefined;
    // One sandbox has one record at a time (it is dropped everywhere when consumed), so the peers that list one
    // hold copies of the same: any of them serves it.
    const first = held[0]!;
    const id = first.id;
    const origin = held.find((h) => h.origin)?.origin;
    return {
      id,
      claimRef: ref,
      sandboxId: first.sandboxId,
      ...(origin ? { origin } : {}),
      holders: held.filter((h) => h.id === id).map((h) => h.peer),
    };
  }

  /** Claim `found` here (pulled from a holder first), as the sandbox its Pod had: same files, memory, processes. */
  async claim(
    found: FoundRecord,
    opts: {
      ttlSeconds?: number;
      idleHibernateSeconds?: number;
      network?: (inherited: VmNetworkPolicy | undefined) => VmNetworkPolicy | undefined;
    },
  ): Promise<SandboxRecord> {
    if (found.holders.length) {
      if (!this.o.puller)
        throw new Error(`hibernation record ${found.id} is held by peers only, and this node pulls none`);
      await this.o.puller.heal(found.id, found.holders);
    }
    return this.o.engine.claimCheckpoint(
      found.id,
      opts.ttlSeconds,
      { claimRef: found.claimRef, object: undefined },
      undefined,
      opts.network,
      opts.idleHibernateSeconds,
      found.origin ? { node: found.origin, claimId: found.sandboxId } : undefined,
    );
  }
}
