import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { SandboxError } from '../../errors.js';
import type { Pki } from '../pki.js';
import { issueCert } from '../pki.js';
import type { ManagedProcess, ProcessGroup } from '../processes.js';
import { createNodeCgroups, destroyNodeCgroups, inAgentsCgroup } from './cgroups.js';
import {
  cniConfig,
  containerdConfig,
  corefile,
  kubeletConfig,
  kubeProxyConfig,
  paths,
  POD_CIDR,
  type NodeLayout,
} from './node-config.js';

const run = promisify(execFile);

/**
 * Real worker nodes for the local control plane: kubelet + containerd 2.x (runc, CNI bridge) per node, one
 * kube-proxy and one CoreDNS for the cluster namespace (docs/real-nodes.md).
 *
 * Everything runs inside the cluster's network namespace `sbx-<k>`, so the machine's own network, iptables and
 * routes are untouched; each node has its own mount namespace (a "holder" process that containerd, kubelet and
 * kube-proxy join with nsenter; `ip netns exec` would remount /sys and hide the cgroup hierarchies) and its own
 * cgroup subtree `sbx-<k>-<node>`, which also holds the node's agents, so stopping a node kills exactly what it ran.
 */
export interface RealNodeBinaries {
  kubelet: string;
  kubeProxy: string;
  containerd: string;
  ctr: string;
  coredns: string;
}

export interface RealNodesOptions {
  count: number;
  clusterIndex: number;
  netns: string;
  /** The namespace's address: the API server's, every node's InternalIP, and CoreDNS's. */
  nodeIp: string;
  apiPort: number;
  dataDir: string;
  pki: Pki;
  clusterDomain: string;
  binaries: RealNodeBinaries;
  /** OCI archives imported into every node's containerd (the pause image at least: no registry is reachable). */
  images: ReadonlyArray<{ name: string; archive: string }>;
  /** Taint the nodes so only Pods that tolerate `sandbox.cocoonstack.io/real-node` land there. */
  taint: boolean;
  procs: ProcessGroup;
  writeKubeconfig(path: string, server: string, pair: { cert: string; key: string }, user: string): Promise<void>;
  kubectl(args: string[]): Promise<string>;
  progress(line: string): void;
}

export interface RealNodes {
  names: string[];
  /** CoreDNS: the address Pods' resolv.conf names. */
  dnsAddress: string;
  /** Everything the nodes ran is gone and their cgroups removed; what could not be removed is named. */
  cleanup(): Promise<string[]>;
}

export const REAL_NODE_LABEL = 'sandbox.cocoonstack.io/real-node';

/**
 * The machine-wide sysctls kubelet insists on (`setupKernelTunables`): with protectKernelDefaults it refuses to
 * start when they differ, without it it rewrites them for the whole machine. Inside each node's mount namespace a
 * file holding the wanted value is bind-mounted over every one that differs, so kubelet reads what it wants and the
 * machine keeps its own values.
 */
const KUBELET_SYSCTLS: Record<string, string> = {
  'vm/overcommit_memory': '1',
  'vm/panic_on_oom': '0',
  'kernel/panic': '10',
  'kernel/panic_on_oops': '1',
  'kernel/keys/root_maxkeys': '1000000',
  'kernel/keys/root_maxbytes': '25000000',
};

/** `<netns>-<node>`: removeRealNodeCgroups finds a cluster's node subtrees by that prefix. */
export const cgroupRootOf = (clusterIndex: number, node: string) => `sbx-${clusterIndex}-${node}`;

export async function startRealNodes(opts: RealNodesOptions): Promise<RealNodes> {
  const names = Array.from({ length: opts.count }, (_, i) => `worker-${i}`);
  const cgroupRoots = names.map((n) => cgroupRootOf(opts.clusterIndex, n));
  const server = `https://${opts.nodeIp}:${opts.apiPort}`;
  const base = join(opts.dataDir, 'nodes');
  const cleanup = async () => {
    const left: string[] = [];
    for (const root of cgroupRoots) left.push(...(await destroyNodeCgroups(root)));
    return left;
  };
  try {
    await mkdir(base, { recursive: true });
    const shadows = await sysctlShadows(join(base, 'sysctl'));
    await podEgress(opts.netns, opts.clusterIndex);

    const dnsKubeconfig = join(base, 'coredns.kubeconfig');
    await opts.writeKubeconfig(dnsKubeconfig, server, opts.pki.admin, 'sbx');
    await writeFile(
      join(base, 'Corefile'),
      corefile({ address: opts.nodeIp, clusterDomain: opts.clusterDomain, kubeconfig: dnsKubeconfig }),
    );
    opts.procs.start('coredns', [
      'nsenter',
      `--net=/run/netns/${opts.netns}`,
      opts.binaries.coredns,
      '-conf',
      join(base, 'Corefile'),
    ]);

    const nodeProcs: ManagedProcess[] = [];
    for (const [index, name] of names.entries()) {
      const layout: NodeLayout = {
        name,
        index,
        nodeIp: opts.nodeIp,
        dir: join(base, name),
        cgroupRoot: cgroupRoots[index]!,
        clusterDomain: opts.clusterDomain,
        clusterDns: opts.nodeIp,
        caFile: opts.pki.ca.cert,
        servingCert: { cert: '', key: '' },
        taints: opts.taint ? [{ key: REAL_NODE_LABEL, value: 'true', effect: 'NoSchedule' }] : [],
      };
      nodeProcs.push(...(await startNode(opts, layout, shadows, server)));
    }
    const proxyKubeconfig = join(base, 'kube-proxy.kubeconfig');
    await mkdir(join(base, 'pki'), { recursive: true });
    const proxyCert = await issueCert(join(base, 'pki'), opts.pki.ca, {
      name: 'kube-proxy',
      commonName: 'system:kube-proxy',
      usage: 'client',
    });
    await opts.writeKubeconfig(proxyKubeconfig, server, proxyCert, 'kube-proxy');
    await writeFile(
      join(base, 'kube-proxy.yaml'),
      kubeProxyConfig({ nodeIp: opts.nodeIp, hostname: names[0] ?? 'worker-0', kubeconfig: proxyKubeconfig }),
    );
    // In the first node's mount namespace: its iptables rules are the cluster namespace's, shared by every node.
    const holder = nodeProcs[0];
    if (holder)
      opts.procs.start('kube-proxy', [
        ...(await inAgentsCgroup(cgroupRoots[0]!)),
        ...joinHolder(holder.pid),
        opts.binaries.kubeProxy,
        `--config=${join(base, 'kube-proxy.yaml')}`,
        '--v=1',
      ]);
    await waitNodesReady(opts, names);
    return { names, dnsAddress: opts.nodeIp, cleanup };
  } catch (err) {
    await cleanup();
    throw err;
  }
}

/** argv prefix that runs a command in a node's mount namespace and the cluster's network namespace. */
const joinHolder = (pid: number) => ['nsenter', '-t', String(pid), '--mount', '--net'];

/** Start one node: certificates, configs, cgroups, the holder, containerd (+ images), kubelet. Returns the holder. */
async function startNode(
  opts: RealNodesOptions,
  layout: NodeLayout,
  shadows: Array<{ file: string; target: string }>,
  server: string,
): Promise<ManagedProcess[]> {
  const p = paths(layout.dir);
  const pkiDir = join(layout.dir, 'pki');
  await Promise.all(
    [pkiDir, p.cniConfDir, p.kubeletRoot, p.podLogs, dirname(p.containerdSocket)].map((d) =>
      mkdir(d, { recursive: true }),
    ),
  );
  const client = await issueCert(pkiDir, opts.pki.ca, {
    name: 'kubelet-client',
    commonName: `system:node:${layout.name}`,
    organization: 'system:nodes',
    usage: 'client',
  });
  layout.servingCert = await issueCert(pkiDir, opts.pki.ca, {
    name: 'kubelet-serving',
    commonName: layout.name,
    ips: [layout.nodeIp],
    dnsNames: [layout.name],
    usage: 'server',
  });
  await opts.writeKubeconfig(p.kubeconfig, server, client, `system:node:${layout.name}`);
  await writeFile(p.kubeletConfig, kubeletConfig(layout));
  await writeFile(p.containerdConfig, containerdConfig(layout));
  await writeFile(join(p.cniConfDir, '10-sbx.conflist'), cniConfig(layout));
  await createNodeCgroups(layout.cgroupRoot);

  const ready = join(layout.dir, 'holder.ready');
  const binds = shadows.map((s) => `mount --bind ${s.file} ${s.target}`);
  // containerd 2.x puts its shims' sockets in /run/containerd/s whatever its state dir: a tmpfs of the node's own
  // there, so nothing of the node's is left in the machine's /run (at most the empty mount point is made).
  const privateRunContainerd = ['mkdir -p /run/containerd', 'mount -t tmpfs -o mode=0711 sbx-node /run/containerd'];
  // Every process the node runs (the holder, containerd and its shims, kubelet) starts in the node's subtree.
  const agents = await inAgentsCgroup(layout.cgroupRoot);
  const holder = opts.procs.start(`${layout.name}-holder`, [
    ...agents,
    'nsenter',
    `--net=/run/netns/${opts.netns}`,
    'unshare',
    '--mount',
    '--propagation',
    'slave',
    'sh',
    '-c',
    `set -e; ${[...binds, ...privateRunContainerd, `touch ${ready}`].join('; ')}; exec sleep infinity`,
  ]);
  await waitFor(
    `${layout.name}'s mount namespace`,
    opts.procs,
    [holder],
    () => Promise.resolve(existsSync(ready)),
    10_000,
  );

  const binDir = dirname(opts.binaries.containerd);
  const containerd = opts.procs.start(
    `${layout.name}-containerd`,
    [...agents, ...joinHolder(holder.pid), opts.binaries.containerd, '--config', p.containerdConfig],
    // Its own shim first on PATH: Debian's containerd 1.6 shim in /usr/bin must not be picked up.
    { PATH: `${binDir}:${process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin'}` },
  );
  const ctr = (args: string[]) =>
    run(opts.binaries.ctr, ['-a', p.containerdSocket, '-n', 'k8s.io', ...args], { timeout: 120_000 });
  await waitFor(
    `${layout.name}'s containerd`,
    opts.procs,
    [holder, containerd],
    () =>
      ctr(['version']).then(
        () => true,
        () => false,
      ),
    30_000,
  );
  for (const image of opts.images) {
    opts.progress(`[${layout.name}] importing ${image.name}`);
    await ctr(['images', 'import', image.archive]).catch((err: unknown) => {
      const e = err as { stderr?: string; message: string };
      throw new SandboxError(
        'cluster.real-node',
        `importing ${image.archive} into ${layout.name}: ${e.stderr ?? e.message}`,
        {
          hint: 'the archive must be an OCI image layout tar (src/cluster/oci-image.ts); delete it from the cache to rebuild it',
        },
      );
    });
  }
  opts.procs.start(`${layout.name}-kubelet`, [
    ...agents,
    ...joinHolder(holder.pid),
    opts.binaries.kubelet,
    `--config=${p.kubeletConfig}`,
    `--kubeconfig=${p.kubeconfig}`,
    `--root-dir=${p.kubeletRoot}`,
    `--hostname-override=${layout.name}`,
    `--node-ip=${layout.nodeIp}`,
    `--node-labels=${REAL_NODE_LABEL}=true`,
    '--v=1',
  ]);
  return [holder];
}

async function sysctlShadows(dir: string): Promise<Array<{ file: string; target: string }>> {
  await mkdir(dir, { recursive: true });
  const out: Array<{ file: string; target: string }> = [];
  for (const [key, want] of Object.entries(KUBELET_SYSCTLS)) {
    const target = `/proc/sys/${key}`;
    const have = await readFile(target, 'utf8').then(
      (s) => s.trim(),
      () => undefined,
    );
    if (have === undefined || have === want) continue;
    const file = join(dir, key.replaceAll('/', '.'));
    await writeFile(file, `${want}\n`);
    out.push({ file, target });
  }
  return out;
}

/**
 * Pods reach the servers this machine runs on the cluster link (webhooks, sandboxd, the aggregated apiserver) with
 * the namespace's own address: the machine has no route back to the pod subnets, and adding one would change its
 * routing table. A masquerade rule in the namespace's own nftables does it instead.
 */
async function podEgress(netns: string, clusterIndex: number): Promise<void> {
  const rules = [
    'table ip sbx_pods {',
    '  chain postrouting {',
    '    type nat hook postrouting priority srcnat; policy accept;',
    `    ip saddr ${POD_CIDR} oifname "sbx${clusterIndex}n" masquerade`,
    '  }',
    '}',
    '',
  ].join('\n');
  const child = run('ip', ['netns', 'exec', netns, 'nft', '-f', '-'], { timeout: 15_000 });
  child.child.stdin?.end(rules);
  await child.catch((err: unknown) => {
    const e = err as { stderr?: string; message: string };
    throw new SandboxError('cluster.real-node', `nft in ${netns}: ${e.stderr ?? e.message}`, {
      hint: 'apt-get install nftables',
    });
  });
}

async function waitNodesReady(opts: RealNodesOptions, names: string[]): Promise<void> {
  const deadline = Date.now() + 90_000;
  let last = '';
  while (Date.now() < deadline) {
    for (const p of opts.procs.list())
      if (names.some((n) => p.name.startsWith(`${n}-`))) await opts.procs.assertRunning(p);
    last = await opts
      .kubectl([
        'get',
        'nodes',
        // A selector, not names: with one name kubectl prints the object itself and `.items` is empty.
        '-l',
        `${REAL_NODE_LABEL}=true`,
        '-o',
        'jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status} {end}',
      ])
      .catch((err: unknown) => String(err));
    if (names.every((n) => last.includes(`${n}=True`))) return;
    await sleep(250);
  }
  throw new SandboxError('cluster.real-node', `real nodes not Ready after 90 s (last: ${last.trim()})`, {
    hint: `see the kubelet and containerd logs in ${join(opts.dataDir, 'logs')}`,
  });
}

async function waitFor(
  what: string,
  procs: ProcessGroup,
  watched: ManagedProcess[],
  ok: () => Promise<boolean>,
  timeoutMs: number,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    for (const p of watched) await procs.assertRunning(p);
    if (await ok()) return;
    await sleep(50);
  }
  throw new SandboxError('cluster.real-node', `${what} not ready after ${timeoutMs} ms`, {
    hint: `see ${watched.map((p) => p.logPath).join(', ')}`,
  });
}
