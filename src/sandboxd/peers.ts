import { request } from 'node:http';
import { silentLogger, type Logger } from '../log/logger.js';
import { keyString, type PoolKey } from './pool-key.js';

/**
 * This node's peers: the static `--peers` list and the addresses other nodes publish in their NodeInventory
 * (`discovered`, src/sandboxd/placement/inventory-peers.ts), never this node itself. What it knows of their warm
 * capacity is refreshed by polling each peer's GET /v1/info (a small, explicit stand-in for gossip), used for the
 * redirect hint on a warm miss; checkpoint owners are found by probing them (placement/owners.ts).
 */
export interface PeerSources {
  /** Addresses learned at run time (NodeInventory); called on every use. */
  discovered?: () => readonly string[];
  /** This node's own advertised address, left out of the list. */
  self?: () => string;
}

export class PeerDirectory {
  private readonly warm = new Map<string, Map<string, number>>(); // peer -> key -> warm
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly peers: readonly string[],
    private readonly token: string | undefined,
    private readonly log: Logger = silentLogger,
    private readonly sources: PeerSources = {},
  ) {}

  addresses(): string[] {
    const self = this.sources.self?.();
    const all = new Set([...this.peers, ...(this.sources.discovered?.() ?? [])]);
    if (self) all.delete(self);
    return [...all];
  }

  withWarm(key: PoolKey): string[] {
    const k = keyString(key);
    return this.addresses().filter((p) => (this.warm.get(p)?.get(k) ?? 0) > 0);
  }

  start(intervalMs = 2000): void {
    if (!this.peers.length && !this.sources.discovered) return;
    const tick = () => void Promise.all(this.addresses().map((p) => this.poll(p)));
    tick();
    this.timer = setInterval(tick, intervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }

  private poll(peer: string): Promise<void> {
    const base = peer.includes('://') ? peer : `http://${peer}`;
    return new Promise((resolve) => {
      const req = request(
        `${base}/v1/info`,
        { headers: this.token ? { authorization: `Bearer ${this.token}` } : {}, timeout: 2000 },
        (res) => {
          let body = '';
          res.on('data', (c: Buffer) => (body += c.toString()));
          res.on('end', () => {
            try {
              const info = JSON.parse(body) as { pools?: Array<{ key: PoolKey; warm: number }> };
              this.warm.set(peer, new Map((info.pools ?? []).map((p) => [keyString(p.key), p.warm])));
            } catch (err) {
              this.log.debug({ err, peer }, 'peer info unreadable');
            }
            resolve();
          });
        },
      );
      req.on('error', () => {
        this.warm.delete(peer);
        resolve();
      });
      req.on('timeout', () => req.destroy());
      req.end();
    });
  }
}
