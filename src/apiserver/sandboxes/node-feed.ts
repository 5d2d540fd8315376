/**
 * One node's change feed (`GET /v1/sandboxes?watch=1` on sandboxd, docs/sandboxd-api.md): a snapshot of the node's
 * live sandboxes and pools, then every change as it happens, one JSON object per line, with a heartbeat. Applied
 * to the store as it arrives; on a reconnect the new snapshot is reconciled against what the store holds for the
 * node (what vanished meanwhile becomes a DELETED event). A feed silent for longer than three heartbeats is
 * treated as broken and reconnected.
 */
import { request, type ClientRequest } from 'node:http';
import type { Logger } from '../../log/logger.js';
import type { PoolKeyOf } from '../../api/pool-key.js';
import type { NodeRow } from './entry.js';
import type { SandboxdClient } from './sandboxd-client.js';
import type { SandboxStore } from './store.js';

export interface PoolCapacityRow {
  key: PoolKeyOf;
  warm: number;
  target: number;
}

type FeedLine =
  | { type: 'BEGIN'; rv: number }
  | { type: 'ADDED' | 'MODIFIED'; sandbox: NodeRow }
  | { type: 'DELETED'; sandbox: { id: string; rv: number } }
  | { type: 'SYNCED'; rv: number; pools: PoolCapacityRow[]; draining?: boolean }
  | { type: 'POOLS'; pools: PoolCapacityRow[]; draining?: boolean }
  | { type: 'PING' };

export interface NodeFeedEvents {
  /** Connected and the snapshot applied (`true`), or the feed broke (`false`). */
  onState(node: string, synced: boolean): void;
  /** `draining`: the node refuses new claims (docs/sandboxd.md "Draining"); placement skips it. */
  onPools(node: string, pools: PoolCapacityRow[], draining: boolean): void;
}

const SILENCE_MS = 15_000;
const MAX_LINE = 4 << 20;

export class NodeFeed {
  private req: ClientRequest | undefined;
  private stopped = false;
  private backoffMs = 250;
  private retryTimer: NodeJS.Timeout | undefined;
  private watchdog: NodeJS.Timeout | undefined;
  private synced = false;
  readonly stats = { connects: 0, lines: 0, failures: 0 };

  constructor(
    readonly node: string,
    readonly address: string,
    private readonly client: SandboxdClient,
    private readonly store: SandboxStore,
    private readonly events: NodeFeedEvents,
    private readonly log: Logger,
  ) {}

  get isSynced(): boolean {
    return this.synced;
  }

  start(): void {
    this.connect();
  }

  stop(): void {
    this.stopped = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    if (this.watchdog) clearTimeout(this.watchdog);
    this.req?.destroy();
  }

  private connect(): void {
    if (this.stopped) return;
    this.stats.connects++;
    let seen: Set<string> | undefined;
    let buf = '';
    const req = request(`http://${this.address}/v1/sandboxes?watch=1`, {
      headers: this.client.headers({ accept: 'application/json' }),
    });
    this.req = req;
    this.armWatchdog(req);
    req.on('response', (res) => {
      if (res.statusCode !== 200) {
        res.resume();
        this.broken(req, `HTTP ${res.statusCode}`);
        return;
      }
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        this.armWatchdog(req);
        buf += chunk;
        if (buf.length > MAX_LINE && buf.indexOf('\n') < 0) return this.broken(req, 'a feed line exceeds 4 MiB');
        let nl: number;
        while ((nl = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, nl);
          buf = buf.slice(nl + 1);
          if (!line) continue;
          let ev: FeedLine;
          try {
            ev = JSON.parse(line) as FeedLine;
          } catch {
            return this.broken(req, 'unparsable feed line');
          }
          this.stats.lines++;
          seen = this.apply(ev, seen);
        }
      });
      res.on('end', () => this.broken(req, 'feed ended'));
      res.on('error', (err) => this.broken(req, err.message));
    });
    req.on('error', (err) => this.broken(req, err.message));
    req.end();
  }

  private apply(ev: FeedLine, seen: Set<string> | undefined): Set<string> | undefined {
    switch (ev.type) {
      case 'BEGIN':
        return new Set();
      case 'ADDED':
      case 'MODIFIED':
        seen?.add(ev.sandbox.id);
        this.store.upsert(this.node, this.address, ev.sandbox);
        return seen;
      case 'DELETED':
        this.store.remove(ev.sandbox.id);
        return seen;
      case 'SYNCED': {
        const removed = seen ? this.store.reconcileNode(this.node, ev.rv, seen) : 0;
        this.synced = true;
        this.backoffMs = 250;
        this.events.onPools(this.node, ev.pools, ev.draining === true);
        this.events.onState(this.node, true);
        this.log.info({ node: this.node, sandboxes: seen?.size ?? 0, removed }, 'node feed synced');
        return undefined;
      }
      case 'POOLS':
        this.events.onPools(this.node, ev.pools, ev.draining === true);
        return seen;
      case 'PING':
        return seen;
    }
  }

  private armWatchdog(req: ClientRequest): void {
    if (this.watchdog) clearTimeout(this.watchdog);
    this.watchdog = setTimeout(() => this.broken(req, `no data for ${SILENCE_MS} ms`), SILENCE_MS);
    this.watchdog.unref();
  }

  /** The connection `req` failed; a late event of an older connection changes nothing. */
  private broken(req: ClientRequest, why: string): void {
    if (req !== this.req) return;
    if (this.watchdog) clearTimeout(this.watchdog);
    this.req = undefined;
    req.destroy();
    if (this.stopped) return;
    this.stats.failures++;
    if (this.synced) this.log.warn({ node: this.node, why }, 'node feed broke; reconnecting');
    else this.log.debug({ node: this.node, why }, 'node feed not connected; retrying');
    this.synced = false;
    this.events.onState(this.node, false);
    this.retryTimer = setTimeout(() => this.connect(), this.backoffMs);
    this.retryTimer.unref();
    this.backoffMs = Math.min(this.backoffMs * 2, 5000);
  }
}
