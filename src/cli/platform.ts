import { mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { startCluster, type ClusterHandle } from '../cluster/index.js';
import type { Logger } from '../log/logger.js';

/**
 * The local platform that `sbx up` runs: today the control plane and simulated standard nodes; the operator,
 * sandboxd nodes and the aggregated apiserver join it as they land. One composition root for all of it.
 */
export interface PlatformOptions {
  cacheDir: string;
  binDir: string | undefined;
  dataDir: string;
  simulatedNodes: number;
  etcdFsync: boolean;
  logger: Logger;
  progress: (line: string) => void;
}

export interface Platform {
  cluster: ClusterHandle;
  pids(): number[];
  stop(): Promise<void>;
}

export async function startPlatform(opts: PlatformOptions): Promise<Platform> {
  await rm(opts.dataDir, { recursive: true, force: true });
  await mkdir(opts.dataDir, { recursive: true });
  const cluster = await startCluster({
    cacheDir: opts.cacheDir,
    binDir: opts.binDir,
    dataDir: join(opts.dataDir, 'cluster'),
    simulatedNodes: opts.simulatedNodes,
    etcdFsync: opts.etcdFsync,
    logger: opts.logger,
    progress: opts.progress,
  });
  return {
    cluster,
    pids: () => cluster.processes().map((p) => p.pid),
    stop: () => cluster.stop(),
  };
}

/** What a detached platform leaves behind so `sbx down` can stop exactly what it started. */
export interface PlatformState {
  status: 'starting' | 'ready' | 'failed';
  supervisorPid: number;
  error?: string;
  kubeconfigPath?: string;
  binDir?: string;
  netns?: string;
  hostInterface?: string;
  pids?: number[];
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
