/**
 * Fixtures of the extension tests (templates, pools, claims): manifests, a client, readers and a per-test
 * namespace with its own operator. Not a test file (test/run.ts only collects *.test.ts).
 */
import type { Condition, SandboxClaim, SandboxTemplate, SandboxWarmPool } from '../../src/api/index.js';
import {
  KubeClient,
  isNotFound,
  SandboxClaims,
  Sandboxes,
  SandboxTemplates,
  SandboxWarmPools,
  type ObjectMeta,
} from '../../src/kube/index.js';
import type { ClaimObj, PoolObj, SandboxObj, TemplateObj } from '../../src/operator/extensions/support.js';
// The Sandbox controller registers itself on import; importing it here makes the fixtures independent of
// whether src/operator/controllers.ts lists it yet.
import '../../src/operator/sandbox/index.js';
import type { OperatorConfig } from '../../src/operator/options.js';
import { createTestNamespace, getTestCluster } from '../support/cluster.js';
import { eventually } from '../support/eventually.js';
import { startTestOperator } from '../support/operator.js';

let client: Promise<KubeClient> | undefined;
export function testClient(): Promise<KubeClient> {
  client ??= getTestCluster().then((c) => KubeClient.fromKubeconfig(c.kubeconfigPath, { qps: -1 }));
  return client;
}

export const PAUSE = 'registry.k8s.io/pause:3.10';

export function templateManifest(
  ns: string,
  name: string,
  spec: Partial<SandboxTemplate['spec']> = {},
  meta: Partial<ObjectMeta> = {},
): TemplateObj {
  return {
    apiVersion: 'extensions.agents.x-k8s.io/v1beta1',
    kind: 'SandboxTemplate',
    metadata: { name, namespace: ns, ...meta },
    spec: {
      podTemplate: {
        metadata: { labels: { app: 'agent' } },
        spec: { containers: [{ name: 'main', image: PAUSE, env: [{ name: 'MODE', value: 'one' }] }] },
      },
      ...spec,
    },
  };
}

export function poolManifest(
  ns: string,
  name: string,
  template: string,
  replicas: number,
  spec: Partial<SandboxWarmPool['spec']> = {},
): PoolObj {
  return {
    apiVersion: 'extensions.agents.x-k8s.io/v1beta1',
    kind: 'SandboxWarmPool',
    metadata: { name, namespace: ns },
    spec: { replicas, sandboxTemplateRef: { name: template }, ...spec },
  };
}

export function claimManifest(
  ns: string,
  name: string,
  pool: string,
  spec: Partial<SandboxClaim['spec']> = {},
  meta: Partial<ObjectMeta> = {},
): ClaimObj {
  return {
    apiVersion: 'extensions.agents.x-k8s.io/v1beta1',
    kind: 'SandboxClaim',
    metadata: { name, namespace: ns, ...meta },
    spec: { warmPoolRef: { name: pool }, ...spec },
  };
}

export const cond = (obj: { status?: { conditions?: Condition[] } } | undefined, type = 'Ready') =>
  obj?.status?.conditions?.find((c) => c.type === type);

export async function getClaim(ns: string, name: string): Promise<ClaimObj | undefined> {
  try {
    return await (await testClient()).get<ClaimObj>(SandboxClaims, ns, name);
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
}

export async function getSandboxOrUndefined(ns: string, name: string): Promise<SandboxObj | undefined> {
  try {
    return await (await testClient()).get<SandboxObj>(Sandboxes, ns, name);
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
}

export async function listSandboxes(ns: string, labelSelector?: string): Promise<SandboxObj[]> {
  return (await (await testClient()).list<SandboxObj>(Sandboxes, ns, { labelSelector })).items;
}

export async function getPool(ns: string, name: string): Promise<PoolObj> {
  return (await testClient()).get<PoolObj>(SandboxWarmPools, ns, name);
}

/** Wait until a claim's Ready condition has the given reason (or status True when reason is undefined). */
export async function waitClaim(ns: string, name: string, reason?: string, timeoutMs = 30_000): Promise<ClaimObj> {
  return (await eventually(() => getClaim(ns, name), {
    timeoutMs,
    what: `claim ${name} ${reason ?? 'Ready'}`,
    until: (c) => {
      const r = cond(c);
      return reason === undefined ? r?.status === 'True' : r?.reason === reason;
    },
  }))!;
}

export async function waitPoolReady(ns: string, name: string, n: number, timeoutMs = 60_000): Promise<PoolObj> {
  return eventually(() => getPool(ns, name), {
    timeoutMs,
    what: `pool ${name} readyReplicas=${n}`,
    until: (p) => p.status?.readyReplicas === n && p.status.replicas === n,
  });
}

export interface Env {
  ns: string;
  client: KubeClient;
  stop(): Promise<void>;
}

/** A namespace with an in-process operator scoped to it. */
export async function setupEnv(prefix: string, overrides: Partial<OperatorConfig> = {}): Promise<Env> {
  const ns = await createTestNamespace(prefix);
  const op = await startTestOperator(ns.name, overrides);
  const c = await testClient();
  return {
    ns: ns.name,
    client: c,
    stop: async () => {
      await op.stop();
      await ns.cleanup();
    },
  };
}

export async function createAll(c: KubeClient, template?: TemplateObj, pool?: PoolObj): Promise<void> {
  if (template) await c.create(SandboxTemplates, template);
  if (pool) await c.create(SandboxWarmPools, pool);
}
