import { stringify } from 'yaml';

/**
 * The configuration files of a real node (docs/real-nodes.md "How a real node is laid out"): kubelet, containerd 2.x,
 * the CNI bridge, kube-proxy and CoreDNS. Pure functions of the node's layout, so a test can read what a node runs.
 */
export interface NodeLayout {
  name: string;
  /** 0-based position among the cluster's real nodes: picks the kubelet port, the bridge and the pod subnet. */
  index: number;
  /** The cluster namespace's address: the Node's InternalIP, where kubelet serves (one port per node). */
  nodeIp: string;
  dir: string;
  cgroupRoot: string;
  clusterDomain: string;
  /** Where Pods send DNS queries (CoreDNS in the cluster namespace). */
  clusterDns: string | undefined;
  caFile: string;
  servingCert: { cert: string; key: string };
  /** Taints the node registers with (the shared test cluster keeps ordinary tests' Pods on kwok nodes). */
  taints: Array<{ key: string; value: string; effect: 'NoSchedule' | 'NoExecute' | 'PreferNoSchedule' }>;
}

/** kubelet's port on the shared node address: several kubelets share the cluster namespace, one port each. */
export const kubeletPort = (index: number) => 10250 + index;
/** The pod subnet of node `index` (its own bridge `cni<index>`): 10.85.<index>.0/24, inside POD_CIDR. */
export const podSubnet = (index: number) => `10.85.${index}.0/24`;
export const POD_CIDR = '10.85.0.0/16';
/** What containerd's CRI and kubelet agree is the sandbox ("pause") image; built locally (node-images.ts). */
export const PAUSE_IMAGE = 'registry.k8s.io/pause:3.10.1';

export const paths = (dir: string) => ({
  containerdConfig: `${dir}/containerd.toml`,
  containerdSocket: `${dir}/containerd/containerd.sock`,
  cniConfDir: `${dir}/cni/net.d`,
  kubeletConfig: `${dir}/kubelet.yaml`,
  kubeletRoot: `${dir}/kubelet`,
  kubeconfig: `${dir}/kubelet.kubeconfig`,
  podLogs: `${dir}/pod-logs`,
});

export function kubeletConfig(n: NodeLayout): string {
  const p = paths(n.dir);
  return stringify({
    apiVersion: 'kubelet.config.k8s.io/v1beta1',
    kind: 'KubeletConfiguration',
    // This machine (and many CI hosts) is cgroup v1; kubelet 1.36 refuses v1 unless told (deprecated, still works).
    failCgroupV1: false,
    cgroupDriver: 'cgroupfs',
    cgroupRoot: `/${n.cgroupRoot}`,
    containerRuntimeEndpoint: `unix://${p.containerdSocket}`,
    address: n.nodeIp,
    port: kubeletPort(n.index),
    readOnlyPort: 0,
    // Off: several kubelets share the namespace, and readiness is read from the Node object instead.
    healthzPort: 0,
    tlsCertFile: n.servingCert.cert,
    tlsPrivateKeyFile: n.servingCert.key,
    authentication: { anonymous: { enabled: false }, webhook: { enabled: true }, x509: { clientCAFile: n.caFile } },
    authorization: { mode: 'Webhook' },
    clusterDomain: n.clusterDomain,
    ...(n.clusterDns ? { clusterDNS: [n.clusterDns] } : {}),
    resolvConf: '/etc/resolv.conf',
    podLogsDir: p.podLogs,
    maxPods: 30,
    failSwapOn: false,
    // kubelet would otherwise rewrite machine-wide sysctls it does not own here (real-node.ts shadows them).
    protectKernelDefaults: true,
    // Generous thresholds: a developer's disk is shared with everything else, and evicting test Pods helps no one.
    evictionHard: {
      'memory.available': '100Mi',
      'nodefs.available': '1%',
      'imagefs.available': '1%',
      'nodefs.inodesFree': '1%',
    },
    imageGCHighThresholdPercent: 99,
    imageGCLowThresholdPercent: 98,
    serializeImagePulls: false,
    registerWithTaints: n.taints,
  });
}

/**
 * containerd 2.x. `restrict_oom_score_adj` is required on hosts without CAP_SYS_RESOURCE (this one): kubelet asks
 * for negative oom_score_adj values that runc cannot set there, and every pod sandbox fails to start.
 */
export function containerdConfig(n: NodeLayout): string {
  const p = paths(n.dir);
  const cri = "plugins.'io.containerd.cri.v1.runtime'";
  return [
    'version = 3',
    `root = ${JSON.stringify(`${n.dir}/containerd/root`)}`,
    `state = ${JSON.stringify(`${n.dir}/containerd/state`)}`,
    // Nothing of this machine's: no /etc/containerd/conf.d drop-ins, no NRI socket in /var/run/nri (no plugins
    // here), the opt plugin's directory under the node instead of /opt/containerd.
    'imports = []',
    "disabled_plugins = ['io.containerd.nri.v1.nri']",
    '[grpc]',
    `  address = ${JSON.stringify(p.containerdSocket)}`,
    '[ttrpc]',
    `  address = ${JSON.stringify(`${n.dir}/containerd/containerd.sock.ttrpc`)}`,
    '[debug]',
    "  level = 'warn'",
    `[${cri}]`,
    '  netns_mounts_under_state_dir = true',
    '  restrict_oom_score_adj = true',
    `  [${cri}.containerd]`,
    "    default_runtime_name = 'runc'",
    `    [${cri}.containerd.runtimes.runc]`,
    "      runtime_type = 'io.containerd.runc.v2'",
    `      [${cri}.containerd.runtimes.runc.options]`,
    '        SystemdCgroup = false',
    // runc's state under the node, not the machine-wide /run/containerd/runc.
    `        Root = ${JSON.stringify(`${n.dir}/runc`)}`,
    `  [${cri}.cni]`,
    "    bin_dirs = ['/usr/lib/cni']",
    `    conf_dir = ${JSON.stringify(p.cniConfDir)}`,
    "[plugins.'io.containerd.internal.v1.opt']",
    `  path = ${JSON.stringify(`${n.dir}/containerd/opt`)}`,
    "[plugins.'io.containerd.cri.v1.images']",
    "  snapshotter = 'overlayfs'",
    "  [plugins.'io.containerd.cri.v1.images'.pinned_images]",
    `    sandbox = ${JSON.stringify(PAUSE_IMAGE)}`,
    '',
  ].join('\n');
}

/** The bridge network of node `index`; the namespace routes between the nodes' bridges itself. */
export function cniConfig(n: NodeLayout): string {
  return JSON.stringify(
    {
      cniVersion: '1.0.0',
      name: `sbx-${n.name}`,
      plugins: [
        {
          type: 'bridge',
          bridge: `cni${n.index}`,
          isGateway: true,
          ipMasq: false,
          hairpinMode: true,
          ipam: {
            type: 'host-local',
            dataDir: `${n.dir}/cni/ipam`,
            ranges: [[{ subnet: podSubnet(n.index) }]],
            routes: [{ dst: '0.0.0.0/0' }],
          },
        },
        { type: 'portmap', capabilities: { portMappings: true } },
      ],
    },
    null,
    2,
  );
}

/**
 * kube-proxy, one per cluster namespace (its rules are the namespace's, shared by every node there). iptables mode
 * with masqueradeAll: br_netfilter cannot be loaded here, so hairpin replies would otherwise bypass conntrack. The
 * conntrack settings of 0 keep it from writing the machine's conntrack sysctls.
 */
export function kubeProxyConfig(opts: { nodeIp: string; hostname: string; kubeconfig: string }): string {
  return stringify({
    apiVersion: 'kubeproxy.config.k8s.io/v1alpha1',
    kind: 'KubeProxyConfiguration',
    mode: 'iptables',
    bindAddress: opts.nodeIp,
    hostnameOverride: opts.hostname,
    clusterCIDR: POD_CIDR,
    clientConnection: { kubeconfig: opts.kubeconfig },
    iptables: { masqueradeAll: true },
    conntrack: { maxPerCore: 0, min: 0, tcpEstablishedTimeout: '0s', tcpCloseWaitTimeout: '0s' },
    metricsBindAddress: '127.0.0.1:10249',
    healthzBindAddress: '127.0.0.1:10256',
  });
}

/**
 * CoreDNS serving the cluster domain from the API (Services, Pods, headless Services' records) on the namespace's
 * address. It forwards nothing: the namespace has no route to the machine's resolver, and no Pod here needs names
 * outside the cluster.
 */
export function corefile(opts: { address: string; clusterDomain: string; kubeconfig: string }): string {
  return [
    // Only the cluster's zones: a query for any other name is REFUSED at once (nothing to forward to, see above).
    `${opts.clusterDomain}:53 in-addr.arpa:53 ip6.arpa:53 {`,
    `  bind ${opts.address}`,
    '  errors',
    `  kubernetes ${opts.clusterDomain} in-addr.arpa ip6.arpa {`,
    `    kubeconfig ${opts.kubeconfig} sbx`,
    '    pods insecure',
    '  }',
    '  cache 5',
    '  loadbalance',
    '}',
    '',
  ].join('\n');
}
