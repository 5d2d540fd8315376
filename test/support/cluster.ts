import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { installCrds } from './crds.js';
import { onFileTeardown } from './file-teardown.js';
import { runKubectl, startCluster, readClusterEnvironment, type ClusterInfo } from '../../src/cluster/index.js';

/**
 * The control plane shared by a test run. test/run.ts starts one and passes its description in SBX_TEST_CLUSTER;
 * a test file run on its own (node --import tsx --test test/x.test.ts) starts a private one instead.
 */
export interface TestCluster extends ClusterInfo {
  kubectl(args: string[], input?: string): Promise<string>;
}

let shared: Promise<TestCluster> | undefined;
/** Stops the private control plane, once one was started (a file run on its own). */
let stopPrivate: (() => Promise<void>) | undefined;
if (!process.env.SBX_TEST_CLUSTER) onFileTeardown(() => stopPrivate?.());

export function getTestCluster(): Promise<TestCluster> {
  shared ??= load();
  return shared;
}

async function load(): Promise<TestCluster> {
  const path = process.env.SBX_TEST_CLUSTER;
  if (path) {
    const info = JSON.parse(readFileSync(path, 'utf8')) as ClusterInfo;
    return {
      ...info,
      kubectl: (args, input) => runKubectl(info.binaries.kubectl ?? 'kubectl', info.kubeconfigPath, args, input),
    };
  }
  const env = readClusterEnvironment();
  const cluster = await startCluster({
    cacheDir: env.cacheDir,
    binDir: env.binDir,
    simulatedNodes: 2,
    // As test/run.ts's shared control plane: one real node, tainted so only tests of real containers land there.
    realNodes: 1,
    realNodeTaint: true,
    progress: (l) => process.stderr.write(`${l}\n`),
  });
  stopPrivate = () => cluster.stop();
  await installCrds(cluster.kubectl);
  return cluster;
}

/** A fresh namespace per test; deleted afterwards without waiting (the namespace controller finishes it). */
export async function createTestNamespace(prefix = 't'): Promise<{ name: string; cleanup(): Promise<void> }> {
  const cluster = await getTestCluster();
  const name = `${prefix}-${randomBytes(4).toString('hex')}`;
  await cluster.kubectl(['create', 'namespace', name]);
  return {
    name,
    cleanup: async () => {
      await cluster.kubectl(['delete', 'namespace', name, '--wait=false', '--ignore-not-found']);
    },
  };
}
