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
/** Minimum Go toolchain to build the above from the module proxy. */
export const MIN_GO_VERSION = '1.26';

export type ComponentName = 'kubernetes' | 'etcd' | 'kwok' | 'helm';

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
  etcd: { name: 'etcd', version: ETCD_VERSION, binaries: ['etcd'] },
  kwok: { name: 'kwok', version: KWOK_VERSION, binaries: ['kwok'] },
  helm: { name: 'helm', version: HELM_VERSION, binaries: ['helm'], onDemand: true },
};
