import { homedir } from 'node:os';
import { join } from 'node:path';

/**
 * The only place src/cluster reads the environment. Everything else receives these values as options.
 */
export interface ClusterEnvironment {
  /** Root of caches kept outside the repo (binaries, guest images), keyed by version. */
  cacheDir: string;
  /** Directory holding all Kubernetes/etcd/kwok binaries, if the user supplies them. */
  binDir: string | undefined;
  /** Where `sbx up --detach` records what it started. */
  stateDir: string;
}

export function readClusterEnvironment(env: NodeJS.ProcessEnv = process.env): ClusterEnvironment {
  const home = homedir();
  return {
    cacheDir: env.SBX_CACHE_DIR || join(env.XDG_CACHE_HOME || join(home, '.cache'), 'sandbox-operator'),
    binDir: env.SANDBOX_K8S_BIN_DIR || undefined,
    stateDir: env.SBX_STATE_DIR || join(env.XDG_STATE_HOME || join(home, '.local', 'state'), 'sandbox-operator'),
  };
}
