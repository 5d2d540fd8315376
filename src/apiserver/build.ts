/**
 * sandbox-apiserver's composition root (metrics-server's Complete()): the only place that constructs clients,
 * informers, the store, the storages and the server. Readiness waits for the NodeInventory cache, the namespaces,
 * the authentication ConfigMap and a first answer from every node's feed, so a restarted server never serves a
 * half-built view.
 */
import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { Gauge, Registry } from 'prom-client';
import type { ObjectMeta } from '../api/meta.js';
import {
  EventRecorder,
  Informer,
  KubeClient,
  LeaderElector,
  Namespaces,
  NodeInventories,
  SandboxClaims,
  SandboxTemplates,
  SandboxWarmPools,
} from '../kube/index.js';
import type { SandboxClaim, SandboxTemplate, SandboxWarmPool } from '../api/index.js';
import { ClaimBinder } from './claim-binder.js';
import { WarmPoolDriver } from './warm-pool-driver.js';
import type { Logger } from '../log/logger.js';
import {
  AuthenticationConfigSource,
  delegatedAuthenticator,
  HEALTH_PATHS,
  SubjectAccessReviewAuthorizer,
} from './auth/index.js';
import { createDiscoveryHandler } from './discovery.js';
import { HealthChecks } from './health.js';
import { createOpenApiHandler } from './openapi.js';
import type { ApiServerConfig } from './options.js';
import { parseRequestInfo } from './request-info.js';
import type { RestStorage } from './resource-handler.js';
import { EventLog } from './sandboxes/event-log.js';
import { Fleet, type InventoryObj } from './sandboxes/fleet.js';
import { SandboxdClient } from './sandboxes/sandboxd-client.js';
import { SandboxStorage } from './sandboxes/storage.js';
import { APISERVER_REPORTING_CONTROLLER, SandboxVerbEvents } from './sandboxes/verb-events.js';
import { SnapshotStorage } from './sandboxes/snapshots.js';
import { SandboxStore } from './sandboxes/store.js';
import { ApiServer } from './server.js';
import { ServingCertificate } from './serving-cert.js';
import { ApiKeys } from './e2b/api-keys.js';
import { AutoResumer } from './e2b/auto-resume.js';
import { SandboxRouter } from './e2b/router.js';
import { SandboxOps } from './e2b/sandbox-ops.js';
import { E2bApi } from './e2b/server.js';

export interface SandboxApiServer {
  address: AddressInfo;
  /** The e2b control plane and data-plane entry point, when configured. */
  e2b: { api: AddressInfo | undefined; sandbox: AddressInfo | undefined };
  /** The CA of a self-managed serving certificate (the APIService caBundle); undefined with given files. */
  caPem: string | undefined;
  store: SandboxStore;
  fleet: Fleet;
  registry: Registry;
  run(signal: AbortSignal): Promise<void>;
}

type NamespaceObj = { metadata: ObjectMeta; status?: { phase?: string } };

/** Run `body` while holding the Lease `name`: stopped at once when the lease is lost, run again when regained. */
function underLease(
  kube: KubeClient,
  config: ApiServerConfig,
  name: string,
  log: Logger,
  body: (signal: AbortSignal) => Promise<void>,
): (signal: AbortSignal) => Promise<void> {
  const elector = new LeaderElector(kube.derive({ qps: -1, userAgent: 'sandbox-apiserver/leader-election' }), {
    namespace: config.serviceNamespace,
    name,
    logger: log,
  });
  return async (signal) => {
    while (!signal.aborted) {
      if (!(await elector.acquire(signal))) break;
      const term = new AbortController();
      const running = body(AbortSignal.any([signal, term.signal]));
      const lost = await elector.hold(signal);
      term.abort();
      await running;
      if (!lost) await elector.release().catch(() => undefined);
    }
  };
}

/**
 * The controllers of the aggregated layout, each behind its own Lease (one replica runs it; the others stand by),
 * with informers of their own: the warm-pool driver (SandboxWarmPools filled by the nodes) and the claim binder
 * (SandboxClaims bound by node-local claims through `storage`'s create).
 */
function controllers(
  kube: KubeClient,
  fleet: Fleet,
  sandboxd: SandboxdClient,
  store: SandboxStore,
  storage: SandboxStorage,
  config: ApiServerConfig,
  log: Logger,
  registry: Registry,
): { run(signal: AbortSignal): Promise<void> } | undefined {
  if (!config.enableWarmPoolDriver && !config.enableClaimBinder) return undefined;
  const l = log.child({ component: 'controllers' });
  const pools = new Informer<SandboxWarmPool & { metadata: ObjectMeta }>(kube, SandboxWarmPools, {
    logger: l,
    registry,
  });
  const templates = new Informer<SandboxTemplate & { metadata: ObjectMeta }>(kube, SandboxTemplates, {
    logger: l,
    registry,
  });
  const claims = config.enableClaimBinder
    ? new Informer<SandboxClaim & { metadata: ObjectMeta }>(kube, SandboxClaims, { logger: l, registry })
    : undefined;
  const runs: Array<(signal: AbortSignal) => Promise<void>> = [];
  if (config.enableWarmPoolDriver) {
    const dl = log.child({ component: 'warm-pool-driver' });
    const driver = new WarmPoolDriver({
      client: kube,
      pools,
      templates,
      fleet,
      sandboxd,
      log: dl,
      resyncMs: config.warmPoolSyncIntervalMs,
    });
    runs.push(underLease(kube, config, 'sandbox-apiserver-warm-pool-driver', dl, (s) => driver.run(s)));
  }
  if (claims) {
    const bl = log.child({ component: 'claim-binder' });
    const binder = new ClaimBinder({
      client: kube,
      claims,
      pools,
      templates,
      store,
      storage,
      fleet,
      log: bl,
      registry,
    });
    runs.push(underLease(kube, config, 'sandbox-apiserver-claim-binder', bl, (s) => binder.run(s)));
  }
  return {
    run: async (signal) => {
      const informers = [pools, templates, ...(claims ? [claims] : [])];
      const started = informers.map((i) => i.start(signal));
      await Promise.all(informers.map((i) => i.synced()));
      await Promise.all(runs.map((r) => r(signal)));
      await Promise.allSettled(started);
    },
  };
}

export async function buildApiServer(
  config: ApiServerConfig,
  log: Logger,
  client?: KubeClient,
): Promise<SandboxApiServer> {
  const registry = new Registry();
  const kube =
    client ??
    (await KubeClient.fromKubeconfig(config.kubeconfig, { userAgent: 'sandbox-apiserver', registry, qps: -1 }));
  const inventories = new Informer<InventoryObj>(kube, NodeInventories, { logger: log, registry });
  const namespaces = new Informer<NamespaceObj>(kube, Namespaces, { logger: log, registry });
  const store = new SandboxStore(log.child({ component: 'store' }), new EventLog(config.watchCacheEvents));
  const sandboxd = new SandboxdClient({
    token: config.sandboxdToken,
    timeoutMs: config.nodeTimeoutMs,
    log: log.child({ component: 'sandboxd-client' }),
  });
  const fleet = new Fleet(inventories, store, sandboxd, log.child({ component: 'fleet' }));
  // A node back after its hibernated sandbox resumed elsewhere still holds the old claim: release it there.
  store.onStale = (node, address, claimId) => {
    void sandboxd
      .release(node, address, claimId)
      .then(() => log.info({ node, claim: claimId }, 'released a claim superseded by a resume on another node'))
      .catch((err: unknown) => log.warn({ err, node, claim: claimId }, 'could not release a superseded claim'));
  };
  const sandboxes = new SandboxStorage(
    store,
    fleet,
    sandboxd,
    {
      phase: (ns) => {
        const obj = namespaces.getByName(undefined, ns);
        if (!obj) return 'missing';
        return obj.metadata.deletionTimestamp || obj.status?.phase === 'Terminating' ? 'terminating' : 'active';
      },
    },
    log.child({ component: 'sandboxes' }),
    new SandboxVerbEvents(
      config.disableSandboxEvents
        ? undefined
        : new EventRecorder(kube, log.child({ component: 'events' }), {
            controller: APISERVER_REPORTING_CONTROLLER,
            registry,
          }),
    ),
  );
  const snapshots = new SnapshotStorage(store, fleet, sandboxd);
  const storages = new Map<string, RestStorage<unknown>>(
    [sandboxes as RestStorage<unknown>, snapshots as RestStorage<unknown>].map((s) => [
      `${s.descriptor.group}/${s.descriptor.version}/${s.descriptor.plural}`,
      s,
    ]),
  );
  const descriptors = [...storages.values()].map((s) => s.descriptor);

  const leaderControllers = controllers(kube, fleet, sandboxd, store, sandboxes, config, log, registry);

  const authnConfig = new AuthenticationConfigSource(kube, { logger: log, registry });
  const authenticator = delegatedAuthenticator(kube, authnConfig, {
    tokenReview: { cacheTtlMs: config.tokenCacheTtlMs },
    ...(config.allowAnonymous ? { anonymous: {} } : { anonymous: { paths: HEALTH_PATHS } }),
    logger: log,
  });
  const authorizer = new SubjectAccessReviewAuthorizer(kube, {
    allowCacheTtlMs: config.authorizedCacheTtlMs,
    denyCacheTtlMs: config.unauthorizedCacheTtlMs,
  });

  const cert = new ServingCertificate(
    config.tlsCertFile && config.tlsKeyFile
      ? { kind: 'files', certFile: config.tlsCertFile, keyFile: config.tlsKeyFile }
      : {
          kind: 'self-managed',
          dir: config.certDir,
          identity: {
            serviceName: config.serviceName,
            namespace: config.serviceNamespace,
            clusterDomain: config.clusterDomain,
            extraSans: config.tlsSans,
          },
        },
    log,
  );
  const health = new HealthChecks();
  health.add(
    'informer-sync',
    () => (inventories.hasSynced && namespaces.hasSynced ? undefined : 'NodeInventory or Namespace cache not synced'),
    ['/readyz'],
  );
  let authnLoaded = false;
  health.add(
    'authentication-config',
    () => (authnLoaded ? undefined : 'extension-apiserver-authentication not loaded'),
    ['/readyz'],
  );
  health.add('node-feeds', () => (fleet.allSynced() ? undefined : 'waiting for a first answer from every node'), [
    '/readyz',
  ]);
  const discovery = createDiscoveryHandler(descriptors);
  const openapi = createOpenApiHandler(descriptors);
  const tls = () => ({ cert: cert.current.certPem, key: cert.current.keyPem, ca: authnConfig.caBundle() || undefined });
  const server = new ApiServer({
    tls: tls(),
    authenticator,
    authorizer,
    requestInfo: parseRequestInfo,
    storages,
    documents: [discovery, openapi],
    health,
    registry,
    maxConnections: config.maxConnections,
    logger: log,
  });
  authnConfig.onChange(() => server.setSecureContext(tls()));
  cert.watch(() => server.setSecureContext(tls()));

  new Gauge({
    name: 'sandbox_apiserver_sandboxes',
    help: 'Sandboxes served',
    registers: [registry],
    collect() {
      this.set(store.size);
    },
  });
  new Gauge({
    name: 'sandbox_apiserver_watchers',
    help: 'Open watches',
    registers: [registry],
    collect() {
      this.set(store.log.watchers);
    },
  });
  new Gauge({
    name: 'sandbox_apiserver_nodes',
    help: 'Nodes by feed state',
    labelNames: ['state'],
    registers: [registry],
    collect() {
      const names = fleet.nodeNames();
      const synced = names.filter((n) => fleet.isSynced(n)).length;
      this.set({ state: 'synced' }, synced);
      this.set({ state: 'unavailable' }, names.length - synced);
    },
  });

  const address = await server.listen(config.bindAddress, config.securePort);
  log.info({ address: `${address.address}:${address.port}` }, 'sandbox-apiserver listening');
  const e2bLog = log.child({ component: 'e2b' });
  let e2bApi: E2bApi | undefined;
  let e2bApiAddr: AddressInfo | undefined;
  if (config.e2b.listen) {
    e2bApi = new E2bApi({
      storage: sandboxes,
      store,
      fleet,
      client: sandboxd,
      keys: new ApiKeys(config.e2b.apiKeys, config.e2b.allowAnonymous),
      templates: config.e2b.templates,
      namespace: config.e2b.namespace,
      domain: config.e2b.domain,
      logger: e2bLog,
    });
    e2bApiAddr = await e2bApi.listen(config.e2b.listen.host, config.e2b.listen.port);
    e2bLog.info({ address: `${e2bApiAddr.address}:${e2bApiAddr.port}` }, 'e2b API listening');
  }
  let router: SandboxRouter | undefined;
  let routerAddr: AddressInfo | undefined;
  if (config.e2b.sandboxListen) {
    const t = config.e2b.sandboxTls;
    router = new SandboxRouter({
      store,
      client: sandboxd,
      namespace: config.e2b.namespace,
      logger: e2bLog,
      ...(t ? { tls: { cert: readFileSync(t.certFile, 'utf8'), key: readFileSync(t.keyFile, 'utf8') } } : {}),
      // The e2b API's own connect resumes (one SandboxOps per listener: it holds nothing but its dependencies).
      autoResume: new AutoResumer({
        ops: new SandboxOps({
          storage: sandboxes,
          fleet,
          store,
          client: sandboxd,
          templates: new Map(config.e2b.templates.map((x) => [x.id, x])),
          namespace: config.e2b.namespace,
          log: e2bLog,
        }),
        logger: e2bLog,
        registry,
      }),
    });
    routerAddr = await router.listen(config.e2b.sandboxListen.host, config.e2b.sandboxListen.port);
    e2bLog.info({ address: `${routerAddr.address}:${routerAddr.port}` }, 'e2b sandbox router listening');
  }
  return {
    address,
    e2b: { api: e2bApiAddr, sandbox: routerAddr },
    caPem: cert.caPem(),
    store,
    fleet,
    registry,
    run: async (signal) => {
      const tasks = [
        inventories.start(signal),
        namespaces.start(signal),
        ...(leaderControllers ? [leaderControllers.run(signal)] : []),
        authnConfig.start(signal).then(() => {
          authnLoaded = true;
          server.setSecureContext(tls());
        }),
      ];
      await new Promise<void>((r) =>
        signal.aborted ? r() : signal.addEventListener('abort', () => r(), { once: true }),
      );
      cert.stop();
      fleet.stop();
      await e2bApi?.close();
      await router?.close();
      await server.close();
      await Promise.allSettled(tasks);
      sandboxd.close();
      if (!client) kube.close();
    },
  };
}
