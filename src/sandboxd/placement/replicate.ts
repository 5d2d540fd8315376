import { createHash } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Counter, Gauge, type Registry } from 'prom-client';
import { silentLogger, type Logger } from '../../log/logger.js';
import type { Checkpoints } from '../checkpoints.js';
import { PeerClient } from './peer-client.js';

/**
 * Checkpoint replication (docs/placement.md "Replicas"): every checkpoint this node holds should be on `replicas`
 * nodes (fewer when the fleet is smaller). A pass probes every peer for each checkpoint (`HEAD .../blob`, as the
 * owner probes do), and when fewer nodes hold it than wanted, asks peers that answered and lack it to copy it
 * (`POST /v1/checkpoints/{id}/replicate`): the peer pulls the record through its heal path (every file hashed
 * against meta.json, zero blocks left as holes, published in one rename) and answers once it is published. So a
 * copy is made by the node that will hold it, from owners it finds itself; the request names no address, and a
 * caller cannot point a node at a host of its choosing.
 *
 * Only the holder first in address order asks, so two owners of one checkpoint do not both ask; if their views of
 * the holders differ for a pass, the second request for a copy joins the pull already running there or finds it
 * published. A pass runs when a checkpoint is taken (kick()) and every `intervalMs`, which is how a node that went
 * away is noticed: its copies stop answering the probe, and the survivors copy again until `replicas` answer.
 */
/** The default of `--checkpoint-replicas`: a checkpoint survives the loss of any one node. */
export const DEFAULT_CHECKPOINT_REPLICAS = 2;

export interface ReplicatorOptions {
  store: Checkpoints;
  client: PeerClient;
  /** The peers' addresses (static --peers and NodeInventory's). */
  peers: () => string[];
  /** This node's advertised address, how peers name it. */
  self: () => string;
  replicas: number;
  intervalMs: number;
  /** How long one copy may take on the peer (its heal budget). */
  copyTimeoutMs: number;
  probeTimeoutMs?: number;
  logger?: Logger;
}

/** Where a checkpoint's copies are, as this node last saw them (GET /v1/checkpoints `copies`). */
export interface Copies {
  /** Addresses of the nodes that hold it, this node included, sorted. */
  nodes: string[];
  /** How many it should have: `replicas`, or the fleet's size when that is smaller. */
  want: number;
  checked_at: string;
}

export class Replicator {
  private readonly seen = new Map<string, Copies>();
  private readonly log: Logger;
  private copies: Counter<'result'> | undefined;
  private wake: (() => void) | undefined;
  private kicked = false;
  readonly stats = { passes: 0, copied: 0, failed: 0 };

  constructor(private readonly opts: ReplicatorOptions) {
    this.log = opts.logger ?? silentLogger;
  }

  /** Its metrics, on the node's registry (made after the replicator: the API owns the registry). */
  register(registry: Registry): void {
    const registers = [registry];
    this.copies = new Counter({
      name: 'sandboxd_checkpoint_replications_total',
      help: "Copies of this node's checkpoints it asked a peer to make, by result (ok|failed)",
      labelNames: ['result'],
      registers,
    });
    const seen = this.seen;
    new Gauge({
      name: 'sandboxd_checkpoints_under_replicated',
      help: 'Checkpoints this node holds that fewer nodes hold than --checkpoint-replicas (as of the last pass)',
      registers,
      collect() {
        let n = 0;
        for (const c of seen.values()) if (c.nodes.length < c.want) n++;
        this.set(n);
      },
    });
  }

  /** What the last pass found for `id`; undefined before the first pass saw it. */
  copiesOf(id: string): Copies | undefined {
    return this.seen.get(id);
  }

  /**
   * NodeInventory's numbers (docs/placement.md "Replicas"): of the checkpoints held now, how many a pass has counted
   * and how many of those had fewer copies than wanted. Counts only, no times, so an unchanged fleet publishes an
   * unchanged object (the publisher skips it).
   */
  summary(): { replicas: number; counted: number; underReplicated: number } {
    let counted = 0;
    let underReplicated = 0;
    for (const ck of this.opts.store.list()) {
      const c = this.seen.get(ck.id);
      if (!c) continue;
      counted++;
      if (c.nodes.length < c.want) underReplicated++;
    }
    return { replicas: this.opts.replicas, counted, underReplicated };
  }

  /** Run a pass soon (a checkpoint was taken or published here). */
  kick(): void {
    this.kicked = true;
    this.wake?.();
  }

  async run(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      this.kicked = false;
      try {
        await this.pass(signal);
      } catch (err) {
        this.log.warn({ err }, 'a checkpoint replication pass failed; retrying at the next one');
      }
      if (this.kicked || signal.aborted) continue;
      await new Promise<void>((resolve) => {
        this.wake = resolve;
        void sleep(this.opts.intervalMs, undefined, { signal }).then(resolve, resolve);
      });
      this.wake = undefined;
    }
  }

  /** One look at every checkpoint held here, copying those below their target. */
  async pass(signal?: AbortSignal): Promise<void> {
    this.stats.passes++;
    const held = new Set<string>();
    for (const ck of this.opts.store.list()) {
      if (signal?.aborted) return;
      held.add(ck.id);
      await this.check(ck.id);
    }
    for (const id of this.seen.keys()) if (!held.has(id)) this.seen.delete(id);
  }

  private async check(id: string): Promise<void> {
    const self = this.opts.self();
    const peers = [...new Set(this.opts.peers())].filter((p) => p !== self);
    const path = `/v1/checkpoints/${encodeURIComponent(id)}`;
    const probes = await Promise.all(
      peers.map((p) =>
        this.opts.client.status(p, 'HEAD', `${path}/blob`, this.opts.probeTimeoutMs ?? 1500).catch(() => 0),
      ),
    );
    const nodes = [self, ...peers.filter((_, i) => probes[i] === 200)];
    const want = Math.min(this.opts.replicas, peers.length + 1);
    const record = () => this.seen.set(id, { nodes: [...nodes].sort(), want, checked_at: new Date().toISOString() });
    record();
    if (nodes.length >= want || [...nodes].sort()[0] !== self) return;
    // Peers that answered and lack it; a peer that did not answer (down, partitioned) is not asked. The order is
    // the checkpoint's own (a hash of id and address), so a fleet's copies spread over its nodes.
    const order = (p: string) => createHash('sha256').update(`${id} ${p}`).digest('hex');
    const candidates = peers.filter((_, i) => probes[i] === 404).sort((a, b) => order(a).localeCompare(order(b)));
    for (const peer of candidates) {
      if (nodes.length >= want) break;
      if (!this.opts.store.get(id)) return; // deleted meanwhile
      const t0 = performance.now();
      try {
        const res = await this.opts.client.open(peer, 'POST', `${path}/replicate`, {
          timeoutMs: this.opts.copyTimeoutMs,
        });
        if (res.statusCode !== 200)
          throw new Error(`${peer} answered ${res.statusCode}: ${await PeerClient.errorText(res)}`);
        res.resume();
        nodes.push(peer);
        record();
        this.stats.copied++;
        this.copies?.inc({ result: 'ok' });
        this.log.info(
          { checkpoint: id, peer, ms: Math.round(performance.now() - t0), copies: nodes.length, want },
          'checkpoint copied to a peer',
        );
      } catch (err) {
        this.stats.failed++;
        this.copies?.inc({ result: 'failed' });
        this.log.warn({ checkpoint: id, peer, err }, 'a peer could not copy a checkpoint; trying the next one');
      }
    }
    if (nodes.length < want)
      this.log.warn({ checkpoint: id, copies: nodes.length, want }, 'checkpoint has fewer copies than wanted');
  }
}
