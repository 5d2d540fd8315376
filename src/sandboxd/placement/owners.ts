import { silentLogger, type Logger } from '../../log/logger.js';
import type { PeerClient } from './peer-client.js';

/**
 * Who else holds a checkpoint (docs/placement.md, the redirect tier): every peer is asked at once with
 * `HEAD /v1/checkpoints/{id}/blob`; the ones that answer 200 are owners, in the order of the peer list, at most
 * three. An answer with owners is kept briefly (checkpoints are immutable, but an owner can delete one or go
 * away: a redirect may be stale, and the caller then gets a 404 there); an empty one is not kept, so a checkpoint
 * taken a moment ago on a peer is found on the next claim.
 */
export interface OwnerOptions {
  /** How long an answer with owners is reused. Default 5 s. */
  cacheMs?: number;
  /** How long a probe waits for a peer. Default 1.5 s. */
  probeTimeoutMs?: number;
  logger?: Logger;
}

export const MAX_OWNERS = 3;

export class OwnerDirectory {
  private readonly cache = new Map<string, { owners: string[]; at: number }>();
  private readonly cacheMs: number;
  private readonly probeTimeoutMs: number;
  private readonly log: Logger;

  constructor(
    private readonly peers: () => string[],
    private readonly client: PeerClient,
    opts: OwnerOptions = {},
  ) {
    this.cacheMs = opts.cacheMs ?? 5000;
    this.probeTimeoutMs = opts.probeTimeoutMs ?? 1500;
    this.log = opts.logger ?? silentLogger;
  }

  async owners(id: string): Promise<string[]> {
    const hit = this.cache.get(id);
    if (hit && Date.now() - hit.at < this.cacheMs) return hit.owners;
    const peers = this.peers();
    const answers = await Promise.all(
      peers.map((p) =>
        this.client.status(p, 'HEAD', `/v1/checkpoints/${encodeURIComponent(id)}/blob`, this.probeTimeoutMs).then(
          (status) => status,
          (err: unknown) => {
            this.log.debug({ err, peer: p, checkpoint: id }, 'owner probe failed');
            return 0;
          },
        ),
      ),
    );
    const owners = peers.filter((_, i) => answers[i] === 200).slice(0, MAX_OWNERS);
    if (owners.length) this.cache.set(id, { owners, at: Date.now() });
    else this.cache.delete(id);
    return owners;
  }

  /** Forget what is known of the id (it was deleted, or an owner failed to serve it). */
  forget(id: string): void {
    this.cache.delete(id);
  }
}
