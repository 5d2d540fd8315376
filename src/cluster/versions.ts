/**
 * Pinned versions of the real binaries the local control plane runs. Kubernetes >= 1.36 because from 1.36 the
 * apiserver streams exec/port-forward to kubelets over WebSockets (ExtendWebSocketsToKubelet), which our
 * virtual-kubelet relies on.
 */
export const KUBERNETES_VERSION = 'v1.36.3';
/** The etcd minor that Kubernetes 1.36 is tested with. */
export const ETCD_VERSION = 'v3.6.16';
/** Simulates ordinary kubelet nodes (the `standard` runtime) — a simulation, named as one wherever it is used. */
export const KWOK_VERSION = 'v0.8.0';
/**
 * Renders and lints the Helm chart in deploy/helm (`helm lint`, `helm template`); a tool of the tests and of users,
 * not of the control plane, so it is built only when asked for (`obtain('helm')`), never by `obtainAll`.
 */
export const HELM_VERSION = 'v4.3.2';
/**
 * The container runtime of real worker nodes (`--real-nodes`). 2.x because kubelet 1.37 drops the fallback for
 * runtimes without the RuntimeConfig CRI call (containerd 1.x); built from the Go module proxy with CGO off, so no
 * distribution package is needed (runc and the CNI plugins come from Debian, see scripts/bootstrap.sh). Its go.mod
 * says `go 1.26.8`: an older 1.26 fetches that toolchain (GOTOOLCHAIN=auto) or refuses the build.
 */
export const CONTAINERD_VERSION = 'v2.3.7';
/** Cluster DNS for real nodes, so `*.svc.cluster.local` resolves in Pods. */
export const COREDNS_VERSION = 'v1.14.7';
/** Minimum Go toolchain to build the above from the module proxy. */
export const MIN_GO_VERSION = '1.26';

export type ComponentName = 'kubernetes' | 'kubernetes-node' | 'etcd' | 'kwok' | 'helm' | 'containerd' | 'coredns';

export interface ComponentSpec {
  name: ComponentName;
  version: string;
  binaries: readonly string[];
  /** Built on demand only: `obtainAll` (the control plane's binaries) leaves it out. */
  onDemand?: boolean;
}

export const COMPONENTS: Record<ComponentName, ComponentSpec> = {
  kubernetes: {
    name: 'kubernetes',
    version: KUBERNETES_VERSION,
    binaries: ['kube-apiserver', 'kube-controller-manager', 'kube-scheduler', 'kubectl'],
  },
  // The node agents of real worker nodes: the same module, version and build as the control plane, on demand
  // because only `--real-nodes` needs them (a separate cache entry so the control plane's stays untouched).
  'kubernetes-node': {
    name: 'kubernetes-node',
    version: KUBERNETES_VERSION,
    binaries: ['kubelet', 'kube-proxy'],
    onDemand: true,
  },
  etcd: { name: 'etcd', version: ETCD_VERSION, binaries: ['etcd'] },
  kwok: { name: 'kwok', version: KWOK_VERSION, binaries: ['kwok'] },
  helm: { name: 'helm', version: HELM_VERSION, binaries: ['helm'], onDemand: true },
  containerd: {
    name: 'containerd',
    version: CONTAINERD_VERSION,
    // The shim must come from the same build: containerd runs the `containerd-shim-runc-v2` first on its PATH.
    binaries: ['containerd', 'containerd-shim-runc-v2', 'ctr'],
    onDemand: true,
  },
  coredns: { name: 'coredns', version: COREDNS_VERSION, binaries: ['coredns'], onDemand: true },
};

/** The on-demand components a real worker node runs (`scripts/obtain-binaries.ts --real-nodes`). */
export const REAL_NODE_COMPONENTS: readonly ComponentName[] = ['kubernetes-node', 'containerd', 'coredns'];
