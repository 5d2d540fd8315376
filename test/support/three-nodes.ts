/**
 * A private aggregated platform of three sandboxd nodes with real microVMs (its own control plane), for the tests
 * that kill a node (test/sandboxd/replicas.test.ts, resume-anywhere.test.ts), which no other file may share: start
 * it, run a command in a Sandbox through the exec subresource, and lose a node (SIGKILL, its VMs killed, its data
 * dir deleted).
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readClusterEnvironment, runKubectl } from '../../src/cluster/index.js';
import { startPlatform, type Platform } from '../../src/cli/platform.js';
import { createLogger } from '../../src/log/logger.js';
import { killRecorded, readRecords } from '../../src/vmm/run-records.js';
import { TEST_TEMPLATE } from './aggregated.js';
import { eventually } from './eventually.js';

export const GROUP = 'agents.x-k8s.io';
export const BASE = `/apis/${GROUP}/v1beta1`;

export interface ThreeNodes {
  platform: Platform;
  dataDir: string;
  kubectl: (args: string[], input?: string) => Promise<string>;
  /** `sh -c script` in Sandbox `ns/name` through the exec subresource; its stdout, trimmed (exit 0 asserted). */
  sh: (ns: string, name: string, script: string) => Promise<string>;
  /** The node dies and its disk is lost: sandboxd SIGKILLed, its VMs killed, its data and run dirs removed. */
  lose: (node: string) => Promise<void>;
  stop: () => Promise<void>;
}

/**
 * Three nodes, one warm VM each, the placement defaults (--checkpoint-replicas 2, a recount every 30 s);
 * `sandboxdArgs` go to every node.
 */
export async function startThreeNodes(name: string, sandboxdArgs: string[] = []): Promise<ThreeNodes> {
  const env = readClusterEnvironment();
  const dataDir = await mkdtemp(join(tmpdir(), `sbx-${name}-`));
  let platform: Platform | undefined;
  try {
    platform = await startPlatform({
      cacheDir: env.cacheDir,
      binDir: env.binDir,
      dataDir,
      layout: 'aggregated',
      simulatedNodes: 0,
      sandboxdNodes: 3,
      warm: 1,
      template: TEST_TEMPLATE,
      pools: `${TEST_TEMPLATE}=1`,
      etcdFsync: false,
      sandboxdArgs,
      logger: createLogger({ level: 'warn', name }),
      progress: (l) => process.stderr.write(`[${name}] ${l}\n`),
    });
  } catch (err) {
    await rm(dataDir, { recursive: true, force: true });
    throw err;
  }
  const p = platform;
  const kubectl = (args: string[], input?: string) =>
    runKubectl(p.cluster.binaries.kubectl ?? 'kubectl', p.cluster.kubeconfigPath, args, input);
  return {
    platform: p,
    dataDir,
    kubectl,
    async sh(ns, sandbox, script) {
      const out = JSON.parse(
        await kubectl(
          ['create', '--raw', `${BASE}/namespaces/${ns}/sandboxes/${sandbox}/exec`, '-f', '-'],
          JSON.stringify({ apiVersion: `${GROUP}/v1beta1`, kind: 'SandboxExecOptions', command: ['sh', '-c', script] }),
        ),
      );
      assert.equal(out.exitCode, 0, `${script}: ${out.stderr}`);
      return String(out.stdout).trim();
    },
    async lose(node) {
      const daemon = p.sandboxd.find((n) => n.node === node)!;
      const proc = p.components.find((c) => c.name === `sandboxd-${node}`)!;
      process.kill(proc.pid, 'SIGKILL');
      await eventually(async () => isAlive(proc.pid), { until: (a) => !a, timeoutMs: 30_000, what: 'sandboxd gone' });
      for (const rec of readRecords(daemon.vmRunRoot)) await killRecorded(rec, daemon.vmRunRoot);
      await rm(join(dataDir, node, 'data'), { recursive: true, force: true });
      await rm(daemon.vmRunRoot, { recursive: true, force: true });
    },
    async stop() {
      await p.stop();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
