import { SandboxError } from '../../errors.js';
import { obtain, type ObtainOptions } from '../binaries.js';
import type { RealNodeBinaries } from './real-node.js';

/** What a real node runs, obtained like the control plane's binaries (cached by version, built on first use). */
export async function obtainRealNodeBinaries(opts: ObtainOptions): Promise<RealNodeBinaries> {
  const all = {
    ...(await obtain('kubernetes-node', opts)),
    ...(await obtain('containerd', opts)),
    ...(await obtain('coredns', opts)),
  };
  const get = (b: string) => {
    const p = all[b];
    if (!p) throw new SandboxError('cluster.binary-missing', `no path for ${b}`);
    return p;
  };
  return {
    kubelet: get('kubelet'),
    kubeProxy: get('kube-proxy'),
    containerd: get('containerd'),
    ctr: get('ctr'),
    coredns: get('coredns'),
  };
}
