/**
 * The aggregated layout for tests: a second control plane (the shared one has the Sandbox CRD, which the
 * APIService would shadow for every other test), with sandbox-apiserver registered as `v1beta1.agents.x-k8s.io`
 * and two sandboxd nodes with real microVMs (template sandbox/minimal), started by `startPlatform` exactly as
 * `sbx up --layout aggregated` starts it. test/run.ts starts one for the run when a test under test/aggregated/
 * is selected and passes its description in SBX_TEST_AGGREGATED; a file run on its own starts a private one.
 */
import { readFileSync } from 'node:fs';
import { request } from 'node:http';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { Sandbox } from 'e2b';
import { readClusterEnvironment, runKubectl, type ClusterInfo } from '../../src/cluster/index.js';
import { startPlatform, type Platform, type SandboxdNode } from '../../src/cli/platform.js';
import { KubeClient } from '../../src/kube/index.js';
import { createLogger } from '../../src/log/logger.js';
import { onFileTeardown } from './file-teardown.js';

export const AGGREGATED_ENV = 'SBX_TEST_AGGREGATED';
export const TEST_TEMPLATE = 'sandbox/minimal';
/** Warm VMs per node: enough for the tests' bursts (they retry a create while the pools refill), few enough that refill churn stays small beside the other suites. */
export const TEST_WARM = 8;
/** Warm sandbox/base VMs per node for the e2b tests (test/aggregated/e2b-*.test.ts). */
export const TEST_E2B_WARM = 3;
/** The e2b template id of a networked sandbox (sandbox/base on the egress lane; test/aggregated/e2b-network.test.ts). */
export const E2B_EGRESS_TEMPLATE = 'base-egress';
/**
 * An e2b template id whose pool no node keeps (sandbox/base, egress lane, medium): every create of it is a clone or
 * a boot on a miss (test/aggregated/e2b-sdk-versions.test.ts).
 */
export const E2B_UNPOOLED_TEMPLATE = 'base-egress-medium';
/** An e2b template whose sandboxes are suspended after E2B_IDLE_SECONDS without use (test/aggregated/e2b-idle.test.ts). */
export const E2B_IDLE_TEMPLATE = 'base-idle';
export const E2B_IDLE_SECONDS = 3;

export interface AggregatedInfo {
  cluster: ClusterInfo;
  pluginDir: string;
  apiserver: NonNullable<Platform['apiserver']>;
  e2b: NonNullable<Platform['e2b']>;
  sandboxd: SandboxdNode[];
}

export interface AggregatedEnv extends AggregatedInfo {
  kubectl(args: string[], input?: string): Promise<string>;
  client(): Promise<KubeClient>;
}

/** Start the aggregated platform (test/run.ts, or a file run alone). */
export async function startAggregatedForTests(
  dataDir?: string,
): Promise<{ info: AggregatedInfo; stop(): Promise<void>; pids(): number[] }> {
  const env = readClusterEnvironment();
  const platform = await startPlatform({
    cacheDir: env.cacheDir,
    binDir: env.binDir,
    dataDir: dataDir ?? (await mkdtemp(join(tmpdir(), 'sbx-agg-'))),
    layout: 'aggregated',
    simulatedNodes: 0,
    sandboxdNodes: 2,
    warm: TEST_WARM,
    template: TEST_TEMPLATE,
    e2bWarm: TEST_E2B_WARM,
    // An egress-lane pool too: every verb works on a networked VM (issue 30), which is part of the contract.
    pools: `${TEST_TEMPLATE}=${TEST_WARM},${TEST_TEMPLATE}:egress=1,sandbox/base:egress=1`,
    // e2b's `base` as sbx up serves it, and a networked sandbox/base under the egress lane's secure default.
    e2bTemplates: {
      base: { template: 'sandbox/base' },
      [E2B_EGRESS_TEMPLATE]: { template: 'sandbox/base', net: 'egress' },
      [E2B_UNPOOLED_TEMPLATE]: { template: 'sandbox/base', net: 'egress', size: 'medium' },
      // `base` with an idle policy (docs/e2b.md "Idle suspend"): the same pool.
      [E2B_IDLE_TEMPLATE]: { template: 'sandbox/base', idleHibernateSeconds: E2B_IDLE_SECONDS },
    },
    etcdFsync: true,
    logger: createLogger({ level: 'warn', name: 'aggregated' }),
    progress: (l) => process.stderr.write(`[aggregated] ${l}\n`),
  });
  const { kubectl: _k, processes: _p, stop: _s, ...cluster } = platform.cluster;
  return {
    info: {
      cluster,
      pluginDir: platform.pluginDir,
      apiserver: platform.apiserver!,
      e2b: platform.e2b!,
      sandboxd: platform.sandboxd,
    },
    stop: () => platform.stop(),
    pids: () => platform.pids(),
  };
}

let shared: Promise<AggregatedEnv> | undefined;

export function getAggregated(): Promise<AggregatedEnv> {
  shared ??= load();
  return shared;
}

function withHelpers(info: AggregatedInfo): AggregatedEnv {
  let client: Promise<KubeClient> | undefined;
  return {
    ...info,
    kubectl: (args, input) =>
      runKubectl(info.cluster.binaries.kubectl ?? 'kubectl', info.cluster.kubeconfigPath, args, input),
    client: () => (client ??= KubeClient.fromKubeconfig(info.cluster.kubeconfigPath, { qps: -1 })),
  };
}

/** Stops the private platform, once one was started (a file run on its own). */
let stopPrivate: (() => Promise<void>) | undefined;
if (!process.env[AGGREGATED_ENV]) onFileTeardown(() => stopPrivate?.());

async function load(): Promise<AggregatedEnv> {
  const path = process.env[AGGREGATED_ENV];
  if (path) return withHelpers(JSON.parse(readFileSync(path, 'utf8')) as AggregatedInfo);
  const started = await startAggregatedForTests();
  stopPrivate = () => started.stop();
  return withHelpers(started.info);
}

/** A fresh namespace on the aggregated cluster; deleted afterwards without waiting. */
export async function aggregatedNamespace(prefix = 'a'): Promise<{ name: string; cleanup(): Promise<void> }> {
  const env = await getAggregated();
  const name = `${prefix}-${randomBytes(4).toString('hex')}`;
  await env.kubectl(['create', 'namespace', name]);
  return {
    name,
    cleanup: async () => {
      await env.kubectl(['delete', 'namespace', name, '--wait=false', '--ignore-not-found']);
    },
  };
}

/** A Sandbox manifest for the test pool. */
export function sandboxManifest(
  name: string,
  extra: { labels?: Record<string, string>; annotations?: Record<string, string>; generateName?: boolean } = {},
) {
  return {
    apiVersion: 'agents.x-k8s.io/v1beta1',
    kind: 'Sandbox',
    metadata: {
      ...(extra.generateName ? { generateName: name } : { name }),
      ...(extra.labels ? { labels: extra.labels } : {}),
      ...(extra.annotations ? { annotations: extra.annotations } : {}),
    },
    spec: { podTemplate: { spec: { containers: [{ name: 'main', image: TEST_TEMPLATE }] } } },
  };
}

/**
 * `kubectl create` of a Sandbox, retried while no warm VM is left this instant (503 "no warm sandbox": the test
 * files share two nodes' pools, which refill in the background); capacity is not what these tests check.
 */
export async function createSandbox(
  env: AggregatedEnv,
  namespace: string,
  manifest: object,
  args: string[] = [],
): Promise<string> {
  for (let i = 0; ; i++) {
    try {
      return await env.kubectl(['create', '-n', namespace, ...args, '-f', '-'], JSON.stringify(manifest));
    } catch (err) {
      if (!/no warm sandbox/.test(String(err)) || i > 300) throw err;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

/** The options an e2b SDK call needs to reach this platform's e2b API and data plane. */
export function e2bOptions(env: AggregatedEnv) {
  return {
    apiUrl: env.e2b.apiUrl,
    sandboxUrl: env.e2b.sandboxUrl,
    apiKey: env.e2b.apiKey,
    requestTimeoutMs: 60_000,
  };
}

/** `f`, retried while the e2b warm pool refills (503 + Retry-After, "no warm sandbox"), for up to two minutes. */
export async function whileE2bBusy<T>(f: () => Promise<T>): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await f();
    } catch (err) {
      if (!/503|no warm sandbox/i.test(String(err)) || attempt > 120) throw err;
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
}

/**
 * The sandboxes an e2b test file makes through the JS SDK (template `base`, retried while the warm pool refills),
 * and their kill in its `after`.
 */
export function e2bSandboxes(env: () => AggregatedEnv) {
  const created: Sandbox[] = [];
  return {
    async create(extra: Parameters<typeof Sandbox.create>[1] = {}): Promise<Sandbox> {
      const s = await whileE2bBusy(() => Sandbox.create('base', { ...e2bOptions(env()), ...extra }));
      created.push(s);
      return s;
    },
    killAll: () => Promise.allSettled(created.map((s) => s.kill())),
  };
}

/** A GET with headers fetch would not send as given (a Host of our choosing, say): the status and the body. */
export function rawGet(url: string, headers: Record<string, string>): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const r = request(url, { headers }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    r.on('error', reject);
    r.end();
  });
}
