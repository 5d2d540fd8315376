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
/** Minimum Go toolchain to build the above from the module proxy. */
export const MIN_GO_VERSION = '1.26';

export type ComponentName = 'kubernetes' | 'etcd' | 'kwok';

export interface ComponentSpec {
  name: ComponentName;
  version: string;
  binaries: readonly string[];
}

export const COMPONENTS: Record<ComponentName, ComponentSpec> = {
  kubernetes: {
    name: 'kubernetes',
    version: KUBERNETES_VERSION,
    binaries: ['kube-apiserver', 'kube-controller-manager', 'kube-scheduler', 'kubectl'],
  },
  etcd: { name: 'etcd', version: ETCD_VERSION, binaries: ['etcd'] },
  kwok: { name: 'kwok', version: KWOK_VERSION, binaries: ['kwok'] },
};
