import { randomBytes } from 'node:crypto';
import { mkdir, readFile, rename, rm, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { applyCrdDir, issueCert, startCluster, type ClusterHandle } from '../cluster/index.js';
import {
  APISERVICE_NAME,
  applyAggregatedRbac,
  registerAggregatedApi,
  SANDBOX_CRD,
  serviceAccountKubeconfig,
} from '../cluster/aggregated.js';
import { freePort } from '../net/free-port.js';
import { defaultRunRoot } from '../sandboxd/engine.js';
import type { Logger } from '../log/logger.js';
import type { PoolNet, PoolSize } from '../api/pool-key.js';
import { Components, type Component } from './components.js';

/**
 * The local platform that `sbx up` runs, in one composition root: the control plane with simulated standard nodes,
 * the generated CRDs, and N sandboxd nodes (real microVMs). The CRD layout adds sandbox-operator (conversion
 * webhook reachable by the apiserver at the cluster's host address) and virtual-kubelet nodes on each sandboxd;
 * the aggregated layout adds sandbox-apiserver, registered as the APIService for agents.x-k8s.io/v1beta1, and
 * leaves the Sandbox CRD out (docs/aggregated-layout.md).
 */
export type Layout = 'crd' | 'aggregated';

export interface PlatformOptions {
  cacheDir: string;
  binDir: string | undefined;
  dataDir: string;
  layout: Layout;
  simulatedNodes: number;
  /** Real worker nodes (kubelet + containerd) for the standard runtime. */
  realNodes?: number;
  sandboxdNodes: number;
  /** Warm VMs each sandboxd keeps of the base template, so the first claim is fast. */
  warm: number;
  /** The template those warm VMs are of (sandbox/base; tests use sandbox/minimal). */
  template?: string;
  /** The nodes' own warm pools (sandboxd `--pools`), instead of `<template>=<warm>`. */
  pools?: string;
  /** Extra sandboxd flags (benchmarks: e.g. `--refill-delay=60000` to keep refills off a measured burst). */
  sandboxdArgs?: string[];
  /**
   * Warm VMs per node for the e2b API's templates (aggregated layout): sandbox/base when `template` is not already
   * it, and, without `pools`, sandbox/base on the egress lane, which `base` is served from (e2b's SDKs ask for the
   * internet by default). `sbx up --layout aggregated` sets it to `--warm`. @default 0
   */
  e2bWarm?: number;
  /**
   * The e2b API's template alias table by template id (written for sandbox-apiserver's `--e2b-templates-file`,
   * docs/e2b.md "Template alias table"); default: base -> sandbox/base.
   */
  e2bTemplates?: Record<string, { template: string; size?: PoolSize; net?: PoolNet; idleHibernateSeconds?: number }>;
  /**
   * The sandboxd nodes (by name, e.g. `node-2`) that pull a checkpoint they lack from a peer and serve it
   * (docs/placement.md); the others redirect to an owner. Nodes find each other through their NodeInventory.
   */
  checkpointPeerHeal?: readonly string[];
  /** etcd's fsync, and sandboxd's before it answers a claim (`sbx up --no-fsync`: both off). */
  etcdFsync: boolean;
  logger: Logger;
  progress: (line: string) => void;
}

export interface ComponentProcess {
  name: string;
  pid: number;
  logPath: string;
}

export interface SandboxdNode {
  node: string;
  address: string;
  /** The node's data plane (envd), aggregated layout only. */
  envdAddress: string | undefined;
  /** The claim gateway (aggregated layout: claims by Kubernetes identity, docs/claim-gateway.md). */
  claimAddress: string | undefined;
  tokenFile: string;
  vmRunRoot: string;
  /** Whether it pulls checkpoints it lacks from peers (PlatformOptions.checkpointPeerHeal). */
  peerHeal: boolean;
}

export interface Platform {
  cluster: ClusterHandle;
  layout: Layout;
  components: ComponentProcess[];
  sandboxd: SandboxdNode[];
  operatorHealth: string | undefined;
  /** The aggregated layout's server: where it listens and the CA that signs its certificate. */
  apiserver: { address: string; caFile: string; apiServiceAvailableMs: number } | undefined;
  /** The e2b API of the aggregated layout: what E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY are set to. */
  e2b: E2bEndpoints | undefined;
  /** A dir with `kubectl-sandbox` (the kubectl plugin), to put on PATH. */
  pluginDir: string;
  pids(): number[];
  stop(): Promise<void>;
}

export interface E2bEndpoints {
  apiUrl: string;
  sandboxUrl: string;
  /** The `domain` the e2b API returns, so the SDK's `getHost(port)` is `<port>-<id>.<domain>` (localSandboxDomain). */
  domain: string;
  apiKey: string;
  apiKeyFile: string;
  namespace: string;
}

/** The namespace the local platform's e2b API serves. */
export const E2B_NAMESPACE = 'e2b';

const LOOPBACK = '127.0.0.1';

const REPO = fileURLToPath(new URL('../../', import.meta.url));

export async function startPlatform(opts: PlatformOptions): Promise<Platform> {
  await rm(opts.dataDir, { recursive: true, force: true });
  await mkdir(opts.dataDir, { recursive: true });
  const cluster = await startCluster({
    cacheDir: opts.cacheDir,
    binDir: opts.binDir,
    dataDir: join(opts.dataDir, 'cluster'),
    simulatedNodes: opts.simulatedNodes,
    realNodes: opts.realNodes ?? 0,
    etcdFsync: opts.etcdFsync,
    logger: opts.logger,
    progress: opts.progress,
  });
  const components = new Components(opts.dataDir);
  const stop = async () => {
    await components.stop();
    await cluster.stop();
  };
  try {
    const aggregated = opts.layout === 'aggregated';
    opts.progress(
      `installing the agent-sandbox CRDs${aggregated ? ` (all but ${SANDBOX_CRD}: the aggregated layout serves sandboxes)` : ''}`,
    );
    await applyCrdDir(cluster.kubectl, join(REPO, 'deploy', 'crds'), aggregated ? [SANDBOX_CRD] : []);
    await cluster.kubectl(['create', 'namespace', 'sandbox-system']);
    const tokenFile = join(opts.dataDir, 'sandboxd.token');
    await writeFile(tokenFile, randomBytes(24).toString('base64url'), { mode: 0o600 });
    const waits: Array<Promise<void>> = [];
    let operatorHealth: string | undefined;
    if (!aggregated) {
      const started = await startOperator(cluster, components, opts.dataDir);
      operatorHealth = started.health;
      waits.push(started.ready);
    }
    const sandboxd = await startSandboxdNodes(cluster, components, opts, tokenFile, waits);
    const started = aggregated ? await startApiServer(cluster, components, opts, tokenFile) : undefined;
    await Promise.all(waits);
    const pluginDir = join(opts.dataDir, 'bin');
    await mkdir(pluginDir, { recursive: true });
    await symlink(join(REPO, 'bin', 'kubectl-sandbox.mjs'), join(pluginDir, 'kubectl-sandbox'));
    return {
      cluster,
      pluginDir,
      layout: opts.layout,
      sandboxd,
      operatorHealth,
      apiserver: started?.apiserver,
      e2b: started?.e2b,
      components: components.list.map((c) => ({ name: c.name, pid: c.child.pid ?? -1, logPath: c.logPath })),
      pids: () => [...cluster.processes().map((p) => p.pid), ...components.pids()],
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}

async function startOperator(cluster: ClusterHandle, components: Components, dataDir: string) {
  const host = cluster.hostAddress;
  const webhookPort = await freePort(host);
  const healthPort = await freePort();
  const metricsPort = await freePort();
  const op = components.launch('sandbox-operator', 'sandbox-operator', [
    `--kubeconfig=${cluster.kubeconfigPath}`,
    `--webhook-host=${host}`,
    `--webhook-port=${webhookPort}`,
    `--webhook-url=https://${host}:${webhookPort}/convert`,
    `--webhook-cert-dir=${join(dataDir, 'webhook-certs')}`,
    `--metrics-bind-address=127.0.0.1:${metricsPort}`,
    `--health-probe-bind-address=127.0.0.1:${healthPort}`,
    `--cluster-domain=${cluster.clusterDomain}`,
  ]);
  const health = `http://127.0.0.1:${healthPort}`;
  return { health, ready: components.waitReady(op, `${health}/readyz`, 120_000) };
}

async function startSandboxdNodes(
  cluster: ClusterHandle,
  components: Components,
  opts: PlatformOptions,
  tokenFile: string,
  waits: Array<Promise<void>>,
): Promise<SandboxdNode[]> {
  const host = cluster.hostAddress;
  const aggregated = opts.layout === 'aggregated';
  const nodes: SandboxdNode[] = [];
  for (let i = 0; i < opts.sandboxdNodes; i++) {
    const node = `node-${i}`;
    const dir = join(opts.dataDir, node);
    await mkdir(dir, { recursive: true });
    const port = await freePort(host);
    const claimAddress = aggregated ? `${host}:${await freePort(host)}` : undefined;
    const vk: string[] = [];
    const envdAddress = aggregated ? `${host}:${await freePort(host)}` : undefined;
    if (aggregated) vk.push('--vk-nodes=', `--envd-listen=${envdAddress}`);
    else {
      const kubelet = await issueCert(dir, cluster.pki.ca, {
        name: 'kubelet',
        commonName: `system:node:${node}`,
        ips: [host],
        usage: 'server',
      });
      vk.push(
        `--kubelet-address=${host}`,
        `--kubelet-port=${10250 + i * 10}`,
        `--kubelet-tls-cert=${kubelet.cert}`,
        `--kubelet-tls-key=${kubelet.key}`,
        `--kubelet-client-ca=${cluster.pki.ca.cert}`,
      );
    }
    opts.progress(
      `starting sandboxd ${node} (microVM templates are built on first use; the first start takes minutes)`,
    );
    const d = components.launch(`sandboxd-${node}`, 'sandboxd', [
      `--node-name=${node}`,
      `--listen=${host}:${port}`,
      `--data-dir=${join(dir, 'data')}`,
      `--token-file=${tokenFile}`,
      `--kubeconfig=${cluster.kubeconfigPath}`,
      ...(claimAddress ? [`--claim-listen=${claimAddress}`] : []),
      ...vk,
      ...poolsFlag(opts),
      ...(opts.checkpointPeerHeal?.includes(node) ? ['--checkpoint-peer-heal', '--checkpoint-ttl-hours=24'] : []),
      ...(opts.etcdFsync ? [] : ['--fsync=false']),
      ...(opts.sandboxdArgs ?? []),
      '--destroy-on-exit',
    ]);
    nodes.push({
      node,
      address: `${host}:${port}`,
      envdAddress,
      claimAddress,
      tokenFile,
      vmRunRoot: defaultRunRoot(join(dir, 'data')),
      peerHeal: opts.checkpointPeerHeal?.includes(node) ?? false,
    });
    waits.push(components.waitReady(d, `http://${host}:${port}/healthz`, 30 * 60_000));
  }
  return nodes;
}

/**
 * sandbox-apiserver on this machine's end of the cluster's veth pair, with a ServiceAccount token bound to the
 * RBAC in deploy/aggregated (not the admin certificate), then its APIService, waited for until Available.
 */
async function startApiServer(
  cluster: ClusterHandle,
  components: Components,
  opts: PlatformOptions,
  tokenFile: string,
): Promise<{ apiserver: NonNullable<Platform['apiserver']>; e2b: E2bEndpoints }> {
  const host = cluster.hostAddress;
  await applyAggregatedRbac(cluster.kubectl);
  await cluster.kubectl(['create', 'namespace', E2B_NAMESPACE]);
  const apiKey = `e2b_${randomBytes(20).toString('hex')}`;
  const apiKeyFile = join(opts.dataDir, 'e2b-api-keys');
  await writeFile(apiKeyFile, `# e2b API keys of the local platform (sbx up)\n${apiKey}\n`, { mode: 0o600 });
  let templatesFile: string | undefined;
  const e2bTemplates = e2bTemplatesOf(opts);
  if (e2bTemplates) {
    templatesFile = join(opts.dataDir, 'e2b-templates.json');
    await writeFile(templatesFile, JSON.stringify({ templates: e2bTemplates }));
  }
  const e2bPort = await freePort(host);
  // The router on loopback: the sandboxes' domain names it (localSandboxDomain), and *.localhost is loopback.
  const routerPort = await freePort(LOOPBACK);
  const domain = localSandboxDomain(routerPort);
  const kubeconfig = await serviceAccountKubeconfig(cluster.kubectl, {
    path: join(opts.dataDir, 'sandbox-apiserver.kubeconfig'),
    server: cluster.server,
    caPem: await readFile(cluster.pki.ca.cert, 'utf8'),
    namespace: 'sandbox-system',
    name: 'sandbox-apiserver',
  });
  const port = await freePort(host);
  const certDir = join(opts.dataDir, 'apiserver-certs');
  opts.progress('starting sandbox-apiserver');
  const c: Component = components.launch('sandbox-apiserver', 'sandbox-apiserver', [
    `--kubeconfig=${kubeconfig}`,
    `--bind-address=${host}`,
    `--secure-port=${port}`,
    `--cert-dir=${certDir}`,
    `--tls-sans=${host}`,
    `--cluster-domain=${cluster.clusterDomain}`,
    `--sandboxd-token-file=${tokenFile}`,
    `--e2b-listen=${host}:${e2bPort}`,
    `--e2b-sandbox-listen=${LOOPBACK}:${routerPort}`,
    `--e2b-domain=${domain}`,
    `--e2b-api-key-file=${apiKeyFile}`,
    `--e2b-namespace=${E2B_NAMESPACE}`,
    ...(templatesFile ? [`--e2b-templates-file=${templatesFile}`] : []),
  ]);
  const caFile = join(certDir, 'ca.crt');
  await components.waitFile(c, caFile, 60_000);
  const caPem = await readFile(caFile, 'utf8');
  await components.waitReady(c, `https://${host}:${port}/readyz`, 120_000, caPem);
  opts.progress(`registering APIService ${APISERVICE_NAME}`);
  const availableMs = await registerAggregatedApi(cluster.kubectl, { address: host, port, caPem });
  return {
    apiserver: { address: `${host}:${port}`, caFile, apiServiceAvailableMs: availableMs },
    e2b: {
      apiUrl: `http://${host}:${e2bPort}`,
      sandboxUrl: `http://${LOOPBACK}:${routerPort}`,
      domain,
      apiKey,
      apiKeyFile,
      namespace: E2B_NAMESPACE,
    },
  };
}

/**
 * The sandbox domain of the local platform: `localhost:<router port>`, so the SDK's `getHost(port)` is
 * `<port>-<id>.localhost:<router port>`. RFC 6761 makes every `*.localhost` name loopback, and curl and browsers
 * resolve it so themselves; glibc's resolver (Node, Python) does only with nss-myhostname. The router routes on
 * that Host header (routeTarget). The SDK's envd and signed file URLs do not use it: E2B_SANDBOX_URL wins for
 * those (docs/e2b.md "URLs the SDK builds").
 */
export function localSandboxDomain(routerPort: number): string {
  return `localhost:${routerPort}`;
}

/** The default aggregated platform also keeps networked sandbox/base VMs warm, which e2b's `base` is served from. */
function servesNetworkedPool(opts: PlatformOptions): boolean {
  return opts.layout === 'aggregated' && (opts.e2bWarm ?? 0) > 0 && !opts.pools;
}

/**
 * e2b's sandboxes have the internet unless asked otherwise (old SDKs send `allow_internet_access: true` on every
 * create), so the SDK's default template `base` is sandbox/base on the egress lane (under its secure default);
 * `base-egress` names the same pool (the table before), `base-offline` the NIC-less one kubectl's pool holds.
 */
export const NETWORKED_E2B_TEMPLATES: NonNullable<PlatformOptions['e2bTemplates']> = {
  base: { template: 'sandbox/base', net: 'egress' },
  'base-egress': { template: 'sandbox/base', net: 'egress' },
  'base-offline': { template: 'sandbox/base' },
};

/** The alias table the platform writes for `--e2b-templates-file` (undefined: the server's default). */
export function e2bTemplatesOf(opts: PlatformOptions): PlatformOptions['e2bTemplates'] {
  return opts.e2bTemplates ?? (servesNetworkedPool(opts) ? NETWORKED_E2B_TEMPLATES : undefined);
}

/** sandboxd's --pools: the layout's template, plus the e2b API's sandbox/base where that is another one. */
export function poolsFlag(opts: PlatformOptions): string[] {
  const template = opts.template ?? 'sandbox/base';
  const pools: string[] = opts.pools ? [opts.pools] : opts.warm > 0 ? [`${template}=${opts.warm}`] : [];
  if (opts.layout === 'aggregated' && (opts.e2bWarm ?? 0) > 0 && template !== 'sandbox/base')
    pools.push(`sandbox/base=${opts.e2bWarm}`);
  // Networked sandboxes (e2b's default: internet on) under the egress lane's secure default: public addresses
  // through NAT, nothing of the node's or the cluster's (docs/vm.md "Networking").
  if (servesNetworkedPool(opts)) pools.push(`sandbox/base:egress=${opts.e2bWarm}`);
  return pools.length ? [`--pools=${pools.join(',')}`] : [];
}

/** What a detached platform leaves behind so `sbx down` can stop exactly what it started. */
export interface PlatformState {
  status: 'starting' | 'ready' | 'failed';
  layout?: Layout;
  supervisorPid: number;
  error?: string;
  kubeconfigPath?: string;
  binDir?: string;
  pluginDir?: string;
  netns?: string;
  hostInterface?: string;
  pids?: number[];
  /** sandboxd VM run roots: `sbx down` kills any QEMU left under them (if sandboxd itself was killed). */
  vmRunRoots?: string[];
  /** The e2b API (aggregated layout): for the export line of `sbx up --detach`. */
  e2b?: { apiUrl: string; sandboxUrl: string; apiKeyFile: string; domain?: string };
  readyMs?: number;
}

export function statePath(stateDir: string): string {
  return join(stateDir, 'platform', 'state.json');
}

export async function readState(stateDir: string): Promise<PlatformState | undefined> {
  try {
    return JSON.parse(await readFile(statePath(stateDir), 'utf8')) as PlatformState;
  } catch {
    return undefined;
  }
}

export async function writeState(stateDir: string, state: PlatformState): Promise<void> {
  await mkdir(join(stateDir, 'platform'), { recursive: true });
  const tmp = `${statePath(stateDir)}.tmp`;
  await writeFile(tmp, JSON.stringify(state, null, 2));
  await rename(tmp, statePath(stateDir));
}
