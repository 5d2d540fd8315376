import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile, readFile } from 'node:fs/promises';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { stringify } from 'yaml';
import { SandboxError } from '../errors.js';
import { silentLogger, type Logger } from '../log/logger.js';
import { KWOK_STAGES_FILE, obtainAll, type BinaryPaths } from './binaries.js';
import { createClusterNetwork, deleteClusterNetwork, inNamespace, type ClusterNetwork } from './network.js';
import { createPki, type Pki } from './pki.js';
import { ProcessGroup, type ManagedProcess } from './processes.js';
import { obtainRealNodeBinaries } from './nodes/binaries.js';
import { startRealNodes, type RealNodes } from './nodes/real-node.js';
import { nodeImageArchives } from './node-images.js';

const run = promisify(execFile);

export const API_PORT = 6443;
const ETCD_PORT = 2379;
const SERVICE_CIDR = '10.96.0.0/16';
const SERVICE_IP = '10.96.0.1';
/** kwok hands out (simulated, unreachable) pod IPs from here. Nothing listens on them; never send traffic there. */
const SIMULATED_POD_CIDR = '10.244.0.0/16';

export interface ClusterOptions {
  cacheDir: string;
  binDir?: string | undefined;
  /** Working directory (PKI, etcd data, logs, kubeconfig). Default: a fresh temp dir, removed by stop(). */
  dataDir?: string;
  /** Simulated (kwok) standard nodes to create. */
  simulatedNodes?: number;
  /** etcd fsync (`--unsafe-no-fsync` when false). Benchmarks state which they used. */
  etcdFsync?: boolean;
  clusterDomain?: string;
  logger?: Logger;
  progress?: (line: string) => void;
  /** Milliseconds to wait for /readyz before giving up. */
  readyTimeoutMs?: number;
  /** Serve kube-apiserver's /debug/pprof (off by default, as in production; benches turn it on to profile). */
  apiserverProfiling?: boolean;
  /** Real worker nodes (kubelet + containerd, nodes/real-node.ts) to start; 0 by default. */
  realNodes?: number;
  /**
   * Taint the real nodes (`sandbox.cocoonstack.io/real-node=true:NoSchedule`) so only Pods that tolerate it run
   * there: the shared test cluster keeps every other test's Pods on the simulated nodes.
   */
  realNodeTaint?: boolean;
  /**
   * Verify kubelets' serving certificates against the cluster CA (`--kubelet-certificate-authority`; default
   * true). false is kubeadm's default: kubelets that serve a self-signed certificate (one without
   * serverTLSBootstrap, or sandboxd's virtual kubelet in a Pod, whose address is only known when it runs) are then
   * reachable for exec, logs and port-forward.
   */
  verifyKubeletCerts?: boolean;
  /** More OCI image archives every real node imports at start (the components' images, for the chart). */
  realNodeImages?: ReadonlyArray<{ name: string; archive: string }>;
}

export interface ClusterInfo {
  kubeconfigPath: string;
  server: string;
  /** Address on this machine that the apiserver can reach (webhooks, APIService endpoints, kubelet nodes). */
  hostAddress: string;
  apiAddress: string;
  netns: string;
  hostInterface: string;
  dataDir: string;
  binDir: string;
  binaries: BinaryPaths;
  pki: Pki;
  pids: number[];
  etcdFsync: boolean;
  clusterDomain: string;
  simulatedNodes: string[];
  /** Real worker nodes (kubelet + containerd) and the cluster DNS they use. */
  realNodes: string[];
  clusterDns: string | undefined;
  readyMs: number;
}

export interface ClusterHandle extends ClusterInfo {
  /** Run the matching kubectl against this cluster. */
  kubectl(args: string[], input?: string): Promise<string>;
  processes(): readonly ManagedProcess[];
  stop(): Promise<void>;
}

const SIMULATED_NODE_LABEL = 'sandbox.cocoonstack.io/simulated';

/**
 * Start a real control plane: etcd, kube-apiserver (aggregation-ready), kube-controller-manager, kube-scheduler,
 * and kwok simulating standard kubelet nodes, inside a fresh network namespace (see network.ts for why).
 */
export async function startCluster(opts: ClusterOptions): Promise<ClusterHandle> {
  const log = opts.logger ?? silentLogger;
  const progress = opts.progress ?? ((l: string) => log.info(l));
  const binaries = await obtainAll({ cacheDir: opts.cacheDir, binDir: opts.binDir, progress });
  const started = Date.now();
  const ownsDataDir = !opts.dataDir;
  const dataDir = opts.dataDir ?? (await mkdtemp(join(tmpdir(), 'sbx-cluster-')));
  await mkdir(join(dataDir, 'logs'), { recursive: true });
  const clusterDomain = opts.clusterDomain ?? 'cluster.local';
  const etcdFsync = opts.etcdFsync ?? true;
  const procs = new ProcessGroup(join(dataDir, 'logs'));
  let net: ClusterNetwork | undefined;
  let realNodes: RealNodes | undefined;

  const teardown = async () => {
    await procs.stop();
    // After the node agents stopped: their containers and shims, then their cgroups.
    const left = await realNodes?.cleanup();
    if (left?.length) log.warn({ cgroups: left }, 'real-node cgroups could not be removed');
    if (net) await deleteClusterNetwork(net);
    if (ownsDataDir) await rm(dataDir, { recursive: true, force: true });
  };

  try {
    net = await createClusterNetwork();
    const ns = net.netns;
    const pki = await createPki({
      dir: join(dataDir, 'pki'),
      apiserverIps: [net.apiAddress],
      serviceIp: SERVICE_IP,
      clusterDomain,
    });
    const server = `https://${net.apiAddress}:${API_PORT}`;
    const kubeconfigPath = join(dataDir, 'kubeconfig');
    await writeKubeconfig(kubeconfigPath, server, pki.ca.cert, pki.admin, 'sbx-admin');
    // In-namespace components talk to the apiserver over the namespace's loopback.
    const inner = (name: string, pair: { cert: string; key: string }) =>
      writeKubeconfig(join(dataDir, `${name}.kubeconfig`), `https://127.0.0.1:${API_PORT}`, pki.ca.cert, pair, name);
    await Promise.all([
      inner('controller-manager', pki.controllerManager),
      inner('scheduler', pki.scheduler),
      inner('kwok', pki.admin),
    ]);

    const bin = (b: string) => {
      const p = binaries[b];
      if (!p) throw new SandboxError('cluster.binary-missing', `no path for ${b}`);
      return p;
    };

    const etcd = procs.start(
      'etcd',
      inNamespace(ns, [
        bin('etcd'),
        `--data-dir=${join(dataDir, 'etcd')}`,
        `--listen-client-urls=http://127.0.0.1:${ETCD_PORT}`,
        `--advertise-client-urls=http://127.0.0.1:${ETCD_PORT}`,
        '--listen-peer-urls=http://127.0.0.1:2380',
        '--initial-advertise-peer-urls=http://127.0.0.1:2380',
        '--initial-cluster=default=http://127.0.0.1:2380',
        '--listen-metrics-urls=http://127.0.0.1:2381',
        '--log-level=warn',
        ...(etcdFsync ? [] : ['--unsafe-no-fsync']),
      ]),
    );

    const apiserver = procs.start(
      'kube-apiserver',
      inNamespace(ns, [
        bin('kube-apiserver'),
        `--etcd-servers=http://127.0.0.1:${ETCD_PORT}`,
        '--bind-address=0.0.0.0',
        `--secure-port=${API_PORT}`,
        `--advertise-address=${net.apiAddress}`,
        `--tls-cert-file=${pki.apiserver.cert}`,
        `--tls-private-key-file=${pki.apiserver.key}`,
        `--client-ca-file=${pki.ca.cert}`,
        `--service-account-key-file=${pki.serviceAccountPub}`,
        `--service-account-signing-key-file=${pki.serviceAccountKey}`,
        `--service-account-issuer=https://kubernetes.default.svc.${clusterDomain}`,
        `--service-cluster-ip-range=${SERVICE_CIDR}`,
        '--authorization-mode=Node,RBAC',
        '--allow-privileged=true',
        '--anonymous-auth=false',
        `--kubelet-client-certificate=${pki.apiserverKubeletClient.cert}`,
        `--kubelet-client-key=${pki.apiserverKubeletClient.key}`,
        ...(opts.verifyKubeletCerts === false ? [] : [`--kubelet-certificate-authority=${pki.ca.cert}`]),
        '--kubelet-preferred-address-types=InternalIP,Hostname',
        // Aggregation: the apiserver proxies to extension apiservers with this client cert; they trust its CA.
        `--requestheader-client-ca-file=${pki.frontProxyCa.cert}`,
        '--requestheader-allowed-names=front-proxy-client',
        '--requestheader-username-headers=X-Remote-User',
        '--requestheader-group-headers=X-Remote-Group',
        '--requestheader-extra-headers-prefix=X-Remote-Extra-',
        `--proxy-client-cert-file=${pki.frontProxyClient.cert}`,
        `--proxy-client-key-file=${pki.frontProxyClient.key}`,
        // No kube-proxy here: route aggregated requests straight to endpoint IPs.
        '--enable-aggregator-routing=true',
        `--profiling=${opts.apiserverProfiling === true}`,
        '--v=1',
      ]),
    );

    await waitForReady(procs, [etcd, apiserver], server, pki, opts.readyTimeoutMs ?? 60_000);
    const readyMs = Date.now() - started;

    procs.start(
      'kube-controller-manager',
      inNamespace(ns, [
        bin('kube-controller-manager'),
        `--kubeconfig=${join(dataDir, 'controller-manager.kubeconfig')}`,
        `--authentication-kubeconfig=${join(dataDir, 'controller-manager.kubeconfig')}`,
        `--authorization-kubeconfig=${join(dataDir, 'controller-manager.kubeconfig')}`,
        '--bind-address=127.0.0.1',
        '--secure-port=10257',
        '--leader-elect=false',
        '--use-service-account-credentials=true',
        `--service-account-private-key-file=${pki.serviceAccountKey}`,
        `--root-ca-file=${pki.ca.cert}`,
        `--cluster-signing-cert-file=${pki.ca.cert}`,
        `--cluster-signing-key-file=${pki.ca.key}`,
        `--service-cluster-ip-range=${SERVICE_CIDR}`,
        '--controllers=*',
        '--v=1',
      ]),
    );
    procs.start(
      'kube-scheduler',
      inNamespace(ns, [
        bin('kube-scheduler'),
        `--kubeconfig=${join(dataDir, 'scheduler.kubeconfig')}`,
        `--authentication-kubeconfig=${join(dataDir, 'scheduler.kubeconfig')}`,
        `--authorization-kubeconfig=${join(dataDir, 'scheduler.kubeconfig')}`,
        '--bind-address=127.0.0.1',
        '--secure-port=10259',
        '--leader-elect=false',
        '--v=1',
      ]),
    );
    const kwokBinDir = dirname(bin('kwok'));
    procs.start(
      'kwok',
      inNamespace(ns, [
        bin('kwok'),
        `--kubeconfig=${join(dataDir, 'kwok.kubeconfig')}`,
        `--config=${join(kwokBinDir, KWOK_STAGES_FILE)}`,
        '--manage-all-nodes=false',
        `--manage-nodes-with-label-selector=${SIMULATED_NODE_LABEL}=true`,
        `--cidr=${SIMULATED_POD_CIDR}`,
        '--node-ip=10.213.255.254',
        '--server-address=127.0.0.1:10247',
        // Node Leases: without them the node lifecycle controller marks simulated nodes NotReady after ~50 s.
        '--node-lease-duration-seconds=40',
      ]),
    );

    const kubectlBin = bin('kubectl');
    const kubectl = async (args: string[], input?: string) => runKubectl(kubectlBin, kubeconfigPath, args, input);

    const simulatedNodes = Array.from({ length: opts.simulatedNodes ?? 1 }, (_, i) => `sim-node-${i}`);
    if (simulatedNodes.length) await kubectl(['apply', '-f', '-'], simulatedNodeManifests(simulatedNodes));
    if (opts.realNodes) {
      const nodeBins = await obtainRealNodeBinaries({ cacheDir: opts.cacheDir, binDir: opts.binDir, progress });
      progress(`starting ${opts.realNodes} real node(s): kubelet + containerd, kube-proxy, CoreDNS`);
      realNodes = await startRealNodes({
        count: opts.realNodes,
        clusterIndex: net.index,
        netns: ns,
        nodeIp: net.apiAddress,
        apiPort: API_PORT,
        dataDir,
        pki,
        clusterDomain,
        binaries: nodeBins,
        images: [...(await nodeImageArchives(opts.cacheDir, progress)), ...(opts.realNodeImages ?? [])],
        taint: opts.realNodeTaint ?? false,
        procs,
        writeKubeconfig: (path, srv, pair, user) => writeKubeconfig(path, srv, pki.ca.cert, pair, user),
        kubectl,
        progress,
      });
    }

    const info: ClusterInfo = {
      kubeconfigPath,
      server,
      hostAddress: net.hostAddress,
      apiAddress: net.apiAddress,
      netns: net.netns,
      hostInterface: net.hostInterface,
      dataDir,
      binDir: dirname(kubectlBin),
      binaries,
      pki,
      pids: procs.pids,
      etcdFsync,
      clusterDomain,
      simulatedNodes,
      realNodes: realNodes?.names ?? [],
      clusterDns: realNodes?.dnsAddress,
      readyMs,
    };
    await writeFile(join(dataDir, 'cluster.json'), JSON.stringify(info, null, 2));
    let stopped = false;
    return {
      ...info,
      kubectl,
      processes: () => procs.list(),
      stop: async () => {
        if (stopped) return;
        stopped = true;
        await teardown();
      },
    };
  } catch (err) {
    await teardown();
    throw err;
  }
}

/** Node objects that kwok (a simulator) will keep Ready and whose pods it marks Running with an IP. */
function simulatedNodeManifests(names: string[]): string {
  return names
    .map((name) =>
      stringify({
        apiVersion: 'v1',
        kind: 'Node',
        metadata: {
          name,
          labels: {
            [SIMULATED_NODE_LABEL]: 'true',
            'kubernetes.io/hostname': name,
            'kubernetes.io/os': 'linux',
            'kubernetes.io/arch': 'amd64',
            type: 'kwok',
          },
          annotations: { 'sandbox.cocoonstack.io/simulation': 'kwok: simulated kubelet, no containers run here' },
        },
        status: {
          allocatable: { cpu: '32', memory: '256Gi', pods: '1000' },
          capacity: { cpu: '32', memory: '256Gi', pods: '1000' },
        },
      }),
    )
    .join('---\n');
}

export async function runKubectl(kubectl: string, kubeconfig: string, args: string[], input?: string): Promise<string> {
  try {
    const child = run(kubectl, [`--kubeconfig=${kubeconfig}`, ...args], { timeout: 60_000, maxBuffer: 64 << 20 });
    if (input !== undefined) {
      child.child.stdin?.end(input);
    }
    const { stdout } = await child;
    return stdout;
  } catch (err) {
    const e = err as NodeJS.ErrnoException & { stderr?: string };
    throw new SandboxError('cluster.kubectl', `kubectl ${args.join(' ')}: ${(e.stderr ?? e.message).trim()}`, {
      cause: err,
    });
  }
}

/** A kubeconfig with the client certificate embedded (the admin's, a component's, a real node's). */
export async function writeKubeconfig(
  path: string,
  server: string,
  caPath: string,
  pair: { cert: string; key: string },
  user: string,
) {
  const [ca, cert, key] = await Promise.all([readFile(caPath), readFile(pair.cert), readFile(pair.key)]);
  const config = {
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: 'sbx', cluster: { server, 'certificate-authority-data': ca.toString('base64') } }],
    users: [
      {
        name: user,
        user: { 'client-certificate-data': cert.toString('base64'), 'client-key-data': key.toString('base64') },
      },
    ],
    contexts: [{ name: 'sbx', context: { cluster: 'sbx', user, namespace: 'default' } }],
    'current-context': 'sbx',
  };
  await writeFile(path, stringify(config), { mode: 0o600 });
}

/** Poll /readyz with the admin cert; fail fast (with the log tail) if a process dies meanwhile. */
async function waitForReady(
  procs: ProcessGroup,
  watched: ManagedProcess[],
  server: string,
  pki: Pki,
  timeoutMs: number,
) {
  const [ca, cert, key] = await Promise.all([readFile(pki.ca.cert), readFile(pki.admin.cert), readFile(pki.admin.key)]);
  const deadline = Date.now() + timeoutMs;
  let last = '';
  while (Date.now() < deadline) {
    for (const p of watched) await procs.assertRunning(p);
    last = await new Promise<string>((resolve) => {
      const req = request(`${server}/readyz`, { ca, cert, key, timeout: 2000 }, (res) => {
        let body = '';
        res.on('data', (d: Buffer) => (body += d.toString()));
        res.on('end', () => resolve(res.statusCode === 200 ? 'ok' : `HTTP ${res.statusCode}: ${body.slice(0, 200)}`));
      });
      req.on('error', (err) => resolve(err.message));
      req.on('timeout', () => req.destroy(new Error('timeout')));
      req.end();
    });
    if (last === 'ok') return;
    await sleep(100);
  }
  throw new SandboxError('cluster.not-ready', `kube-apiserver not ready after ${timeoutMs} ms (last: ${last})`, {
    hint: `see logs in ${procs.list()[0]?.logPath ? dirname(procs.list()[0]!.logPath) : 'the data dir'}`,
  });
}
