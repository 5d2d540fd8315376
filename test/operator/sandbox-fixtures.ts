/**
 * Shared fixtures of the Sandbox controller tests: a client on the test cluster, Sandbox manifests, and
 * status readers. (Not a test file: test/run.ts only collects *.test.ts.)
 */
import type { Condition, Sandbox } from '../../src/api/index.js';
import {
  KubeClient,
  Pods,
  Sandboxes,
  Services,
  isNotFound,
  type KubeObject,
  type ResourceType,
} from '../../src/kube/index.js';
import type { Pod, SandboxObject, Service } from '../../src/operator/sandbox/index.js';
import type { OperatorConfig } from '../../src/operator/options.js';
import { createTestNamespace, getTestCluster } from '../support/cluster.js';
import { startTestOperator } from '../support/operator.js';
import { eventually } from '../support/eventually.js';

let client: Promise<KubeClient> | undefined;

export function testClient(): Promise<KubeClient> {
  client ??= getTestCluster().then(async (c) => {
    const kube = await KubeClient.fromKubeconfig(c.kubeconfigPath, { qps: -1 });
    return kube;
  });
  return client;
}

export function sandboxManifest(
  namespace: string,
  name: string,
  spec: Partial<Sandbox['spec']> = {},
  meta: Partial<SandboxObject['metadata']> = {},
): SandboxObject {
  return {
    apiVersion: 'agents.x-k8s.io/v1beta1',
    kind: 'Sandbox',
    metadata: { name, namespace, ...meta },
    spec: {
      podTemplate: {
        metadata: { labels: { app: 'demo' }, annotations: { 'example.com/note': 'hello' } },
        spec: {
          containers: [
            { name: 'main', image: 'registry.k8s.io/pause:3.10', ports: [{ containerPort: 8888, name: 'http' }] },
          ],
        },
      },
      ...spec,
    },
  };
}

export async function createSandbox(sb: SandboxObject): Promise<SandboxObject> {
  return (await testClient()).create(Sandboxes, sb);
}

export async function getOrUndefined<T extends KubeObject>(
  rt: ResourceType,
  namespace: string,
  name: string,
): Promise<T | undefined> {
  try {
    return await (await testClient()).get<T>(rt, namespace, name);
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
}

export const getSandbox = async (ns: string, name: string) =>
  (await testClient()).get<SandboxObject>(Sandboxes, ns, name);
export const getPod = (ns: string, name: string) => getOrUndefined<Pod>(Pods, ns, name);
export const getService = (ns: string, name: string) => getOrUndefined<Service>(Services, ns, name);

export function condition(sb: SandboxObject, type: string): Condition | undefined {
  return sb.status?.conditions?.find((c) => c.type === type);
}

/** Conditions without lastTransitionTime, keyed by type (for status-exact assertions). */
export function conditionTable(sb: SandboxObject): Record<string, Omit<Condition, 'lastTransitionTime' | 'type'>> {
  const out: Record<string, Omit<Condition, 'lastTransitionTime' | 'type'>> = {};
  for (const c of sb.status?.conditions ?? [])
    out[c.type] = { status: c.status, reason: c.reason, message: c.message, observedGeneration: c.observedGeneration };
  return out;
}

export async function waitForSandbox(
  ns: string,
  name: string,
  until: (sb: SandboxObject) => boolean,
  what: string,
  timeoutMs = 30_000,
): Promise<SandboxObject> {
  return eventually(() => getSandbox(ns, name), { until, what, timeoutMs, intervalMs: 100 });
}

export const isReady = (sb: SandboxObject) => condition(sb, 'Ready')?.status === 'True';
export const readyReason = (reason: string) => (sb: SandboxObject) => condition(sb, 'Ready')?.reason === reason;

export async function patchSandbox(ns: string, name: string, patch: unknown): Promise<SandboxObject> {
  return (await testClient()).patch<SandboxObject>(Sandboxes, ns, name, patch, 'merge');
}

/** Pods in a namespace (live LIST; tests only). */
export async function listPods(ns: string): Promise<Pod[]> {
  return (await (await testClient()).list<Pod>(Pods, ns)).items;
}

export interface OperatorEnv {
  ns: string;
  op: Awaited<ReturnType<typeof startTestOperator>>;
}

/** A fresh namespace and an operator scoped to it (extensions off), torn down afterwards. */
export async function withOperator<T>(
  prefix: string,
  fn: (env: OperatorEnv) => Promise<T>,
  overrides: Partial<OperatorConfig> = {},
): Promise<T> {
  await testClient(); // starts the node-lease keeper
  const ns = await createTestNamespace(prefix);
  const op = await startTestOperator(ns.name, { extensions: false, ...overrides });
  try {
    await eventually(() => op.manager.synced, { until: (v) => v, what: 'operator caches', timeoutMs: 10_000 });
    return await fn({ ns: ns.name, op });
  } finally {
    await op.stop();
    await ns.cleanup();
  }
}

/** Scrape the operator's own /metrics. */
export async function operatorMetrics(op: OperatorEnv['op']): Promise<string> {
  const addr = op.manager.boundAddresses.metrics;
  if (!addr) throw new Error('operator metrics server not bound');
  const res = await fetch(`http://${addr}/metrics`);
  return res.text();
}

/** Sum of a Prometheus counter's samples whose labels match all of `match` (values may be regexes). */
export function sumSamples(text: string, metric: string, match: Record<string, string | RegExp> = {}): number {
  let total = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${metric}{`) && !line.startsWith(`${metric} `)) continue;
    const m = /^([^{\s]+)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    for (const kv of (m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[kv[1]!] = kv[2]!;
    const ok = Object.entries(match).every(([k, v]) =>
      typeof v === 'string' ? labels[k] === v : v.test(labels[k] ?? ''),
    );
    if (ok) total += Number(m[3]);
  }
  return total;
}
