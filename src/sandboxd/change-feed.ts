/**
 * sandboxd's change feed, `GET /v1/sandboxes?watch=1` (docs/sandboxd-api.md "Change feed"): what lets the
 * aggregated apiserver serve the fleet's sandboxes live, with watches that push instead of polling. A subscriber
 * first gets a snapshot (BEGIN, one ADDED per claim, SYNCED with the pools), then every change as the engine makes
 * it, pool capacity coalesced to one line per 20 ms, and a PING every 5 s so a silent peer is noticed. Each row
 * carries the node's change counter (`rv`, monotonic across restarts), which lets a reader order a claim's answer
 * against the feed's lines. A subscriber that stops reading is dropped once 8 MiB are queued (it reconnects and
 * gets a fresh snapshot), so one stuck reader cannot grow the daemon.
 */
import type { ServerResponse } from 'node:http';
import type { NodeEngine, SandboxRecord } from './engine.js';
import { phaseOf } from './claims.js';

export const PING_MS = 5000;
const POOLS_COALESCE_MS = 20;
const MAX_BACKLOG_BYTES = 8 << 20;

/** A claim as every reader of the API sees it: never its token. */
export function sandboxRow(rec: SandboxRecord) {
  return {
    id: rec.id,
    key: rec.key,
    deadline: rec.deadline,
    claimed_at: rec.claimedAt,
    updated_at: rec.updatedAt ?? rec.claimedAt,
    hibernated: rec.hibernated,
    phase: phaseOf(rec),
    rv: rec.rv ?? 0,
    // Paused with its files only (files-pause.ts): no VM; resume reboots with the saved files.
    ...(rec.filesOnly ? { pause_mode: 'filesystem', layer_bytes: rec.layerBytes ?? 0 } : {}),
    ...(rec.fromCheckpoint ? { from_checkpoint: rec.fromCheckpoint } : {}),
    ...(rec.claimRef ? { claim_ref: rec.claimRef } : {}),
    ...(rec.object ? { object: rec.object } : {}),
    ...(rec.vcpus ? { vcpus: rec.vcpus } : {}),
    ...(rec.memoryMiB ? { memory_mib: rec.memoryMiB } : {}),
    ...(rec.hibernationCheckpoint ? { hibernation_checkpoint: rec.hibernationCheckpoint } : {}),
    ...(rec.resumedFrom ? { resumed_from: { node: rec.resumedFrom.node, claim_id: rec.resumedFrom.claimId } } : {}),
    // The egress policy its VM enforces (absent: the secure default); rules only, no secret.
    ...(rec.network ? { network: rec.network } : {}),
  };
}

export class ChangeFeed {
  private readonly subscribers = new Set<ServerResponse>();
  private poolsTimer: NodeJS.Timeout | undefined;
  private readonly ping: NodeJS.Timeout;
  private readonly unhook: () => void;

  constructor(private readonly engine: NodeEngine) {
    const onClaimed = (rec: SandboxRecord) => this.broadcast({ type: 'ADDED', sandbox: sandboxRow(rec) });
    const onChanged = (rec: SandboxRecord) => this.broadcast({ type: 'MODIFIED', sandbox: sandboxRow(rec) });
    const onReleased = (rec: SandboxRecord) =>
      this.broadcast({ type: 'DELETED', sandbox: { id: rec.id, rv: rec.rv ?? 0 } });
    const onPools = () => this.schedulePools();
    engine.on('claimed', onClaimed);
    engine.on('changed', onChanged);
    engine.on('released', onReleased);
    engine.on('pools', onPools);
    this.unhook = () => {
      engine.off('claimed', onClaimed);
      engine.off('changed', onChanged);
      engine.off('released', onReleased);
      engine.off('pools', onPools);
    };
    this.ping = setInterval(() => this.broadcast({ type: 'PING' }), PING_MS);
    this.ping.unref();
  }

  get size(): number {
    return this.subscribers.size;
  }

  /** Stream the snapshot and then the changes to `res` until either side closes. */
  serve(res: ServerResponse): void {
    res.writeHead(200, { 'content-type': 'application/x-ndjson', 'cache-control': 'no-cache' });
    const rv = this.engine.changeCounter;
    const lines = [JSON.stringify({ type: 'BEGIN', rv })];
    for (const rec of this.engine.list()) lines.push(JSON.stringify({ type: 'ADDED', sandbox: sandboxRow(rec) }));
    lines.push(JSON.stringify({ type: 'SYNCED', rv, pools: this.pools(), ...this.draining() }));
    // The snapshot and the subscription happen in one tick: no change can fall between them.
    res.write(`${lines.join('\n')}\n`);
    this.subscribers.add(res);
    res.on('close', () => this.subscribers.delete(res));
  }

  close(): void {
    clearInterval(this.ping);
    if (this.poolsTimer) clearTimeout(this.poolsTimer);
    this.unhook();
    for (const res of this.subscribers) res.end();
    this.subscribers.clear();
  }

  private pools() {
    return this.engine
      .poolStatus()
      .map((p) => ({ key: p.key, warm: p.warm, target: p.target, ...(p.owner ? { owner: p.owner } : {}) }));
  }

  /** `draining: true` on SYNCED and POOLS lines while the node drains (drain.ts): placement skips the node. */
  private draining(): { draining?: true } {
    return this.engine.draining ? { draining: true } : {};
  }

  private schedulePools(): void {
    if (this.poolsTimer || this.subscribers.size === 0) return;
    this.poolsTimer = setTimeout(() => {
      this.poolsTimer = undefined;
      this.broadcast({ type: 'POOLS', pools: this.pools(), ...this.draining() });
    }, POOLS_COALESCE_MS);
    this.poolsTimer.unref();
  }

  private broadcast(line: unknown): void {
    if (this.subscribers.size === 0) return;
    const text = `${JSON.stringify(line)}\n`;
    for (const res of this.subscribers) {
      if (res.writableLength > MAX_BACKLOG_BYTES) {
        res.destroy();
        this.subscribers.delete(res);
        continue;
      }
      res.write(text);
    }
  }
}
