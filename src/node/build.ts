import { KubeClient } from '../kube/index.js';
import type { Logger } from '../log/logger.js';
import { NodeEngine } from './engine.js';
import { SandboxdApi } from './http-api.js';
import { InventoryPublisher } from './inventory.js';
import type { SandboxdConfig } from './options.js';
import { PeerDirectory } from './peers.js';

/** sandboxd's composition root: engine, HTTP API, peers, NodeInventory publisher (and virtual nodes). */
export interface Sandboxd {
  engine: NodeEngine;
  api: SandboxdApi;
  address: string;
  run(signal: AbortSignal): Promise<void>;
}

export async function buildSandboxd(config: SandboxdConfig, log: Logger): Promise<Sandboxd> {
  const engine = new NodeEngine({
    dataDir: config.dataDir,
    nodeName: config.nodeName,
    advertiseAddr: config.advertiseAddr,
    maxClaims: config.maxClaims,
    refillConcurrency: config.refillConcurrency,
    defaultTtlSeconds: config.defaultTtlSeconds,
    logger: log.child({ component: 'engine' }),
  });
  await engine.start();
  if (config.pools.length) engine.setTargets(config.pools.map((p) => ({ key: p.key, warm: p.warm })));
  const peers = new PeerDirectory(config.peers, config.rootToken, log);
  const api = new SandboxdApi({
    engine,
    peers,
    auth: { rootToken: config.rootToken, tenants: config.tenants, allowAnonymous: config.allowAnonymous },
    logger: log.child({ component: 'api' }),
  });
  const bound = await api.listen(config.listenHost, config.listenPort);
  const address = `${bound.address}:${bound.port}`;
  log.info({ address, node: config.nodeName }, 'sandboxd API listening');
  const client = config.kubeconfig
    ? await KubeClient.fromKubeconfig(config.kubeconfig, { userAgent: 'sandboxd' })
    : undefined;
  return {
    engine,
    api,
    address,
    run: async (signal) => {
      peers.start();
      const tasks: Promise<unknown>[] = [];
      if (client && config.publishInventory) {
        const publisher = new InventoryPublisher({
          client,
          engine,
          nodeName: config.nodeName,
          address: config.advertiseAddr,
          intervalMs: config.publishIntervalMs,
          logger: log,
        });
        tasks.push(publisher.run(signal));
      }
      await new Promise<void>((r) => signal.addEventListener('abort', () => r(), { once: true }));
      peers.stop();
      await Promise.allSettled(tasks);
      await api.close();
      await engine.close({ destroyVms: config.destroyOnExit });
      client?.close();
    },
  };
}
