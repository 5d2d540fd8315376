import { KubeClient } from '../kube/index.js';
import type { Logger } from '../log/logger.js';
import { NodeEngine } from './engine.js';
import { ClaimGateway } from './claim-gateway.js';
import { KubeClaimGateway } from './gateway/index.js';
import { SandboxdApi } from './http-api.js';
import { InventoryPublisher } from './inventory.js';
import type { SandboxdConfig } from './options.js';
import { PeerDirectory } from './peers.js';
import { Healer } from './placement/heal.js';
import { InventoryPeers } from './placement/inventory-peers.js';
import { OwnerDirectory } from './placement/owners.js';
import { PeerClient } from './placement/peer-client.js';
import { startVirtualNodes, type VirtualNodes } from './vk/index.js';
import { join } from 'node:path';
import { SandboxError } from '../errors.js';

/** sandboxd's composition root: engine, HTTP API, claim gateway, peers and checkpoint placement, NodeInventory
 * publisher (and virtual nodes). */
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
    refillDelayMs: config.refillDelayMs,
    spareVmms: config.spareVmms,
    primeWarmVms: config.primeWarmVms,
    defaultTtlSeconds: config.defaultTtlSeconds,
    checkpointTtlMs: config.checkpointTtlHours * 3_600_000,
    logger: log.child({ component: 'engine' }),
  });
  await engine.start();
  if (config.pools.length) engine.setTargets(config.pools.map((p) => ({ key: p.key, warm: p.warm })));
  const client = config.kubeconfig
    ? await KubeClient.fromKubeconfig(config.kubeconfig, { userAgent: 'sandboxd' })
    : undefined;
  const inventoryPeers = client ? new InventoryPeers(client, config.nodeName, log) : undefined;
  const peers = new PeerDirectory(config.peers, config.rootToken, log, {
    discovered: inventoryPeers && (() => inventoryPeers.addresses()),
    self: () => engine.advertiseAddr,
  });
  const peerClient = new PeerClient(config.rootToken);
  const placementLog = log.child({ component: 'placement' });
  const api = new SandboxdApi({
    engine,
    peers,
    auth: { rootToken: config.rootToken, tenants: config.tenants, allowAnonymous: config.allowAnonymous },
    pauseMode: config.pauseMode,
    logger: log.child({ component: 'api' }),
    placement: {
      owners: new OwnerDirectory(() => peers.addresses(), peerClient, { logger: placementLog }),
      healer: config.checkpointPeerHeal
        ? new Healer({
            store: engine.checkpointStore,
            driver: engine.driver,
            client: peerClient,
            maxConcurrent: config.checkpointHealConcurrency,
            budgetMs: config.checkpointHealTimeoutMs,
            maxRecordBytes: config.checkpointMaxBytes,
            logger: placementLog,
          })
        : undefined,
      client: peerClient,
      peers: () => peers.addresses(),
    },
  });
  const bound = await api.listen(config.listenHost, config.listenPort);
  const address = `${bound.address}:${bound.port}`;
  if (!config.advertiseExplicit && config.listenPort === 0) engine.advertiseAddr = address;
  log.info({ address, node: config.nodeName }, 'sandboxd API listening');
  let gateway: ClaimGateway | undefined;
  let kubeGateway: KubeClaimGateway | undefined;
  if (config.claimListen) {
    if (client && config.gatewayIdentity === 'kubernetes')
      kubeGateway = new KubeClaimGateway({
        api,
        engine,
        client,
        dataDir: config.dataDir,
        log: log.child({ component: 'claim-gateway' }),
        authCacheTtlMs: config.gatewayAuthCacheTtlMs,
        authStaleMs: config.gatewayAuthStaleMs,
        adoptionIntervalMs: config.gatewayAdoptionIntervalMs,
      });
    gateway = new ClaimGateway({
      api,
      auth: { rootToken: config.rootToken, tenants: config.tenants, allowAnonymous: config.allowAnonymous },
      kube: kubeGateway,
      logger: log.child({ component: 'claim-gateway' }),
    });
    const g = await gateway.listen(config.claimListen.host, config.claimListen.port);
    log.info(
      { address: `${g.address}:${g.port}`, kubernetesIdentity: kubeGateway !== undefined },
      'claim gateway listening',
    );
  }
  let vk: VirtualNodes | undefined;
  if (client && config.vkNodes.length) {
    const { kubeletAddress, kubeletTlsCert, kubeletTlsKey, kubeletClientCa } = config;
    if (!kubeletAddress || !kubeletTlsCert || !kubeletTlsKey || !kubeletClientCa)
      throw new SandboxError(
        'sandboxd.flags',
        'virtual nodes need --kubelet-address, --kubelet-tls-cert, --kubelet-tls-key and --kubelet-client-ca',
        { hint: 'or pass --vk-nodes "" to run without virtual-kubelet nodes' },
      );
    vk = await startVirtualNodes({
      engine,
      client,
      nodeName: config.nodeName,
      nodes: config.vkNodes.map((kind) => ({ kind })),
      hostAddress: kubeletAddress,
      kubeletPortBase: config.kubeletPort,
      tls: { cert: kubeletTlsCert, key: kubeletTlsKey, clientCa: kubeletClientCa },
      stateDir: join(config.dataDir, 'vk'),
      logger: log,
    });
    log.info({ nodes: vk.nodes }, 'virtual-kubelet nodes registered');
  }
  return {
    engine,
    api,
    address,
    run: async (signal) => {
      peers.start();
      const tasks: Promise<unknown>[] = [];
      if (inventoryPeers) tasks.push(inventoryPeers.run(signal));
      if (client && config.publishInventory) {
        const publisher = new InventoryPublisher({
          client,
          engine,
          nodeName: config.nodeName,
          address: engine.advertiseAddr,
          intervalMs: config.publishIntervalMs,
          logger: log,
        });
        tasks.push(publisher.run(signal));
      }
      if (kubeGateway) tasks.push(kubeGateway.run(signal));
      await new Promise<void>((r) => signal.addEventListener('abort', () => r(), { once: true }));
      peers.stop();
      await vk?.stop({ deleteNodes: config.destroyOnExit });
      await Promise.allSettled(tasks);
      await gateway?.close();
      await api.close();
      peerClient.close();
      await engine.close({ destroyVms: config.destroyOnExit });
      client?.close();
    },
  };
}
