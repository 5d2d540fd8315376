import { EventRecorder, KubeClient } from '../kube/index.js';
import type { Logger } from '../log/logger.js';
import { NodeEngine } from './engine.js';
import { NodeDrain } from './drain.js';
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
import { Replicator } from './placement/replicate.js';
import { startVirtualNodes, type VirtualNodes } from './vk/index.js';
import { RecordHandoff } from './placement/handoff.js';
import { selfSignedKubeletCert } from './vk/serving-cert.js';
import { vmMemoryGauge } from './vm-metrics.js';
import { join } from 'node:path';
import { SandboxError } from '../errors.js';
import { EnvdServer } from './envd/server.js';
import { SIMULATION_NOTE, SimulatedMicrovmDriver } from '../vmm/index.js';

/** sandboxd's composition root: engine, HTTP API, claim gateway, peers and checkpoint placement, NodeInventory
 * publisher (and virtual nodes). */
export interface Sandboxd {
  engine: NodeEngine;
  api: SandboxdApi;
  address: string;
  run(signal: AbortSignal): Promise<void>;
}

export async function buildSandboxd(config: SandboxdConfig, baseLog: Logger): Promise<Sandboxd> {
  // A simulated node says so on every log line, in /v1/info, its metrics and its NodeInventory.
  const sim = config.engine === 'sim';
  const log = sim ? baseLog.child({ engine: 'sim' }) : baseLog;
  const driver = sim
    ? new SimulatedMicrovmDriver({
        root: join(config.dataDir, 'sim'),
        cloneMs: config.simCloneMs,
        logger: log.child({ component: 'sim-driver' }),
      })
    : undefined;
  if (driver)
    log.warn({ cloneMs: driver.cloneMs }, `SIMULATED engine: ${SIMULATION_NOTE}; warm VMs and claims are records`);
  const replicating = config.checkpointReplicas > 1;
  const engine = new NodeEngine({
    driver,
    // Where checkpoints are copied to peers, hibernations are too: a hibernated sandbox can then resume elsewhere.
    portableHibernation: replicating,
    dataDir: config.dataDir,
    nodeName: config.nodeName,
    advertiseAddr: config.advertiseAddr,
    maxClaims: config.maxClaims,
    maxSuspended: config.maxSuspended,
    idleCpuPercent: config.idleCpuPercent,
    maxLayerMiB: config.maxLayerMib,
    refillConcurrency: config.refillConcurrency,
    refillDelayMs: config.refillDelayMs,
    spareVmms: config.spareVmms,
    vmNetworkCidr: config.vmNetworkCidr,
    vmResolver: config.vmResolver,
    // Priming runs a command in each warm VM; a simulated one has no guest to run it in.
    primeWarmVms: sim ? false : config.primeWarmVms,
    defaultTtlSeconds: config.defaultTtlSeconds,
    checkpointTtlMs: config.checkpointTtlHours * 3_600_000,
    maxCheckpoints: config.maxCheckpoints,
    maxCheckpointsPerNamespace: config.maxCheckpointsPerNamespace,
    fsync: config.fsync,
    logger: log.child({ component: 'engine' }),
  });
  await engine.start();
  // Before any listener: a drain the operator asked for before a restart refuses the first claim too.
  const drain = new NodeDrain({ engine, dataDir: config.dataDir, logger: log });
  drain.restore();
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
  // One puller for both uses (a claim's heal and a peer's request for a copy), so its concurrency cap is the node's.
  const puller =
    config.checkpointPeerHeal || replicating
      ? new Healer({
          store: engine.checkpointStore,
          driver: engine.driver,
          client: peerClient,
          maxConcurrent: config.checkpointHealConcurrency,
          budgetMs: config.checkpointHealTimeoutMs,
          maxRecordBytes: config.checkpointMaxBytes,
          logger: placementLog,
        })
      : undefined;
  const replicator = replicating
    ? new Replicator({
        store: engine.checkpointStore,
        client: peerClient,
        peers: () => peers.addresses(),
        self: () => engine.advertiseAddr,
        replicas: config.checkpointReplicas,
        intervalMs: config.checkpointReplicaIntervalMs,
        copyTimeoutMs: config.checkpointHealTimeoutMs,
        logger: placementLog,
      })
    : undefined;
  const api = new SandboxdApi({
    engine,
    peers,
    envdAddr: config.envdAdvertiseAddr,
    auth: { rootToken: config.rootToken, tenants: config.tenants, allowAnonymous: config.allowAnonymous },
    pauseMode: config.pauseMode,
    logger: log.child({ component: 'api' }),
    drain,
    placement: {
      owners: new OwnerDirectory(() => peers.addresses(), peerClient, { logger: placementLog }),
      healer: config.checkpointPeerHeal ? puller : undefined,
      puller: replicating ? puller : undefined,
      replicator,
      client: peerClient,
      peers: () => peers.addresses(),
    },
  });
  vmMemoryGauge(api.registry, engine);
  replicator?.register(api.registry);
  if (replicator) drain.copiesOf = (id) => replicator.copiesOf(id);
  // A checkpoint taken here is copied at once, not at the next interval.
  engine.on('checkpoint', () => replicator?.kick());
  // A hibernation record consumed (its sandbox woke, moved or went): the copies on peers go too, best effort (a peer
  // that is down keeps its copy until --checkpoint-ttl-hours).
  engine.on('checkpoint-dropped', (id: string) => {
    const others = peers.addresses().filter((peer) => peer !== engine.advertiseAddr);
    void peerClient.deleteCheckpointOn(others, id, (peer, err) =>
      placementLog.debug({ err, peer, checkpoint: id }, 'hibernation record delete not forwarded'),
    );
  });
  const bound = await api.listen(config.listenHost, config.listenPort);
  const address = `${bound.address}:${bound.port}`;
  if (!config.advertiseExplicit && config.listenPort === 0) engine.advertiseAddr = address;
  log.info({ address, node: config.nodeName }, 'sandboxd API listening');
  let envd: EnvdServer | undefined;
  if (config.envdListen) {
    envd = new EnvdServer({
      engine,
      maxUploadBytes: config.envdMaxUploadBytes,
      maxConnections: config.envdMaxConnections,
      logger: log.child({ component: 'envd' }),
    });
    const e = await envd.listen(config.envdListen.host, config.envdListen.port);
    log.info({ address: `${e.address}:${e.port}` }, 'data plane (envd) listening');
  }
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
        events: new EventRecorder(client, log.child({ component: 'events' }), {
          controller: 'sandboxd',
          registry: api.registry,
        }),
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
    const { kubeletAddress, kubeletClientCa } = config;
    if (!kubeletAddress || !kubeletClientCa || !config.kubeletTlsCert !== !config.kubeletTlsKey)
      throw new SandboxError(
        'sandboxd.flags',
        'virtual nodes need --kubelet-address and --kubelet-client-ca (and --kubelet-tls-cert with --kubelet-tls-key, or neither for a self-signed serving certificate)',
        { hint: 'or pass --vk-nodes "" to run without virtual-kubelet nodes' },
      );
    const serving =
      config.kubeletTlsCert && config.kubeletTlsKey
        ? { cert: config.kubeletTlsCert, key: config.kubeletTlsKey }
        : selfSignedKubeletCert(join(config.dataDir, 'vk', 'pki'), kubeletAddress);
    vk = await startVirtualNodes({
      engine,
      client,
      nodeName: config.nodeName,
      nodes: config.vkNodes.map((kind) => ({ kind })),
      hostAddress: kubeletAddress,
      kubeletPortBase: config.kubeletPort,
      tls: { ...serving, clientCa: kubeletClientCa },
      stateDir: join(config.dataDir, 'vk'),
      onCordon: (node, cordoned) => {
        if (cordoned) drain.start(`node/${node}`);
        else drain.stop(`node/${node}`);
      },
      // Where hibernations are published for peers, `kubectl drain` keeps an evicted Pod's sandbox for its
      // replacement (docs/virtual-kubelet.md "Draining the node").
      ...(replicating
        ? {
            handoff: new RecordHandoff({
              engine,
              client: peerClient,
              peers: () => peers.addresses(),
              self: () => engine.advertiseAddr,
              ...(puller ? { puller } : {}),
              logger: placementLog,
            }),
          }
        : {}),
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
      if (replicator) tasks.push(replicator.run(signal));
      if (client && config.publishInventory) {
        const publisher = new InventoryPublisher({
          client,
          engine,
          nodeName: config.nodeName,
          address: engine.advertiseAddr,
          intervalMs: config.publishIntervalMs,
          logger: log,
          replication: replicator,
        });
        tasks.push(publisher.run(signal));
      }
      if (kubeGateway) tasks.push(kubeGateway.run(signal));
      await new Promise<void>((r) => signal.addEventListener('abort', () => r(), { once: true }));
      peers.stop();
      await vk?.stop({ deleteNodes: config.destroyOnExit });
      await Promise.allSettled(tasks);
      await gateway?.close();
      await envd?.close();
      await api.close();
      await drain.close();
      peerClient.close();
      await engine.close({ destroyVms: config.destroyOnExit });
      client?.close();
    },
  };
}
