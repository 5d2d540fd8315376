import { Informer, NodeInventories, type KubeClient } from '../../kube/index.js';
import type { ObjectMeta } from '../../api/index.js';
import type { Logger } from '../../log/logger.js';

type InventoryObj = { metadata: ObjectMeta; node?: string; address?: string };

/**
 * Peers from the NodeInventory objects other nodes publish (docs/sandboxd-api.md "NodeInventory"): their `address` is where their
 * sandboxd listens. Watched, so a node that starts (or restarts on another port) is a peer as soon as it has
 * published; this node's own object is left out by name.
 */
export class InventoryPeers {
  private readonly informer: Informer<InventoryObj>;

  constructor(
    client: KubeClient,
    private readonly nodeName: string,
    logger: Logger,
  ) {
    this.informer = new Informer<InventoryObj>(client, NodeInventories, { logger });
  }

  addresses(): string[] {
    return this.informer
      .list()
      .filter((o) => (o.node ?? o.metadata.name) !== this.nodeName && typeof o.address === 'string' && o.address)
      .map((o) => o.address!)
      .sort();
  }

  run(signal: AbortSignal): Promise<void> {
    return this.informer.start(signal);
  }
}
