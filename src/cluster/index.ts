export { startCluster, runKubectl, API_PORT } from './control-plane.js';
export type { ClusterHandle, ClusterInfo, ClusterOptions } from './control-plane.js';
export { obtain, obtainAll, cachedBinDir } from './binaries.js';
export { issueCert } from './pki.js';
export type { CertPair, Pki } from './pki.js';
export { listClusterNamespaces, deleteClusterNetwork } from './network.js';
export { readClusterEnvironment } from './options.js';
export { isAlive } from './file-lock.js';
export { KUBERNETES_VERSION, ETCD_VERSION, KWOK_VERSION } from './versions.js';
