/**
 * A sandboxd node for tests that run in the test process: an engine with its own run dirs (template built or
 * loaded from cache first, so pod start-up is a clone), a kubelet serving certificate from the cluster CA, and
 * the virtual-kubelet nodes registered on the shared cluster.
 */
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { issueCert } from '../../src/cluster/index.js';
import type { KubeClient } from '../../src/kube/index.js';
import { createLogger } from '../../src/log/logger.js';
import { NodeEngine } from '../../src/sandboxd/engine.js';
import { startVirtualNodes, type VirtualNodes, type VirtualNodesOptions } from '../../src/sandboxd/vk/index.js';
import type { TestCluster } from './cluster.js';

export const MINIMAL_KEY = { template: 'sandbox/minimal', net: 'none', size: 'small' } as const;

export interface TestVirtualNode {
  engine: NodeEngine;
  vk: VirtualNodes;
  /** Stop the virtual nodes (deleting their Node objects), destroy every VM, remove the dir. */
  stop(): Promise<void>;
}

export async function startTestVirtualNode(opts: {
  cluster: TestCluster;
  client: KubeClient;
  /** Node name prefix, unique per test file. */
  base: string;
  podResyncMs?: number;
  /** The engine over its data dir (e.g. the simulated one, test/support/sim-node.ts). @default QEMU microVMs */
  engine?: (dataDir: string) => NodeEngine;
  /** Told of a cordon or uncordon of the virtual Nodes (a drain, test/sandboxd/vk-cordon.test.ts). */
  onCordon?: VirtualNodesOptions['onCordon'];
}): Promise<TestVirtualNode> {
  const { cluster, client, base } = opts;
  const dir = mkdtempSync(join(tmpdir(), `${base}-`));
  chmodSync(dir, 0o755); // QEMU drops to an unprivileged user and must reach its run dir
  const log = createLogger({ level: process.env.SBX_TEST_LOG_LEVEL ?? 'warn', name: base });
  const engine =
    opts.engine?.(join(dir, 'e')) ??
    new NodeEngine({
      dataDir: join(dir, 'e'),
      nodeName: base,
      advertiseAddr: `${cluster.hostAddress}:0`,
      logger: log,
    });
  let vk: VirtualNodes | undefined;
  const stop = async () => {
    await vk?.stop({ deleteNodes: true });
    await engine.close({ destroyVms: true });
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await engine.start();
    await engine.prepare(MINIMAL_KEY);
    const serving = await issueCert(dir, cluster.pki.ca, {
      name: 'kubelet',
      commonName: `${base}-kubelet`,
      ips: [cluster.hostAddress],
      usage: 'server',
    });
    vk = await startVirtualNodes({
      engine,
      client,
      nodeName: base,
      hostAddress: cluster.hostAddress,
      kubeletPortBase: 0,
      tls: { cert: serving.cert, key: serving.key, clientCa: cluster.pki.ca.cert },
      stateDir: join(dir, 'vk'),
      logger: log,
      podResyncMs: opts.podResyncMs,
      onCordon: opts.onCordon,
    });
    return { engine, vk, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}
