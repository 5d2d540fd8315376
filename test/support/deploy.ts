/**
 * The generated install manifests as the tests use them: rendered by the real tools (helm from the cache,
 * `kubectl kustomize`), parsed into objects, and the RBAC of one component re-targeted at a test namespace under
 * unique names, so a test can bind a ServiceAccount to exactly the shipped rules without touching other tests.
 */
import { spawn, spawnSync } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { cp, mkdir, readFile, symlink } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';
import type { Component, Components } from '../../src/cli/components.js';
import { serviceAccountKubeconfig } from '../../src/cluster/aggregated.js';
import { obtain, readClusterEnvironment, type ClusterHandle } from '../../src/cluster/index.js';
import { COPY_RUNTIME_FILES, IMAGE_TARGETS } from '../../src/deploy/images.js';
import { ensureGuestImage } from '../../src/guest/images.js';
import { exportGuestImages, PREBUILT_ENV } from '../../src/guest/prebuilt.js';
import type { PolicyRule } from '../../src/deploy/rbac.js';
import { getTestCluster } from './cluster.js';

export const REPO = fileURLToPath(new URL('../../', import.meta.url));
export const CHART = `${REPO}deploy/helm/sandbox-operator`;
export const KUSTOMIZE = `${REPO}deploy/kustomize`;

export type Obj = Record<string, unknown> & {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string>; annotations?: Record<string, string> };
};

export function parseObjects(yaml: string): Obj[] {
  return parseAllDocuments(yaml)
    .map((d) => d.toJS() as Obj | null)
    .filter((o): o is Obj => o !== null);
}

export const identity = (o: Obj) => `${o.apiVersion}/${o.kind}/${o.metadata.namespace ?? ''}/${o.metadata.name}`;

let helm: Promise<string> | undefined;
/** The pinned helm, built from the Go module proxy into the cache the first time. */
export function helmBinary(): Promise<string> {
  helm ??= (async () => {
    const env = readClusterEnvironment();
    return (
      await obtain('helm', {
        cacheDir: env.cacheDir,
        binDir: env.binDir,
        progress: (l) => process.stderr.write(`${l}\n`),
      })
    ).helm!;
  })();
  return helm;
}

/** Run a tool to completion (stdin from `input`); its exit status and output, never a throw. */
export function runTool(
  bin: string,
  args: string[],
  input?: string,
): Promise<{ ok: boolean; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(bin, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', (err) => resolve({ ok: false, stdout, stderr: `${stderr}${err.message}` }));
    child.on('close', (code) => resolve({ ok: code === 0, stdout, stderr }));
    child.stdin.end(input ?? '');
  });
}

/** `helm template` of the chart in `namespace` with `--set` pairs; throws with helm's message on failure. */
export async function helmTemplate(namespace: string, set: Record<string, string | boolean> = {}): Promise<Obj[]> {
  const args = ['template', 'sandbox-operator', CHART, '--namespace', namespace];
  for (const [k, v] of Object.entries(set)) args.push('--set', `${k}=${String(v)}`);
  const r = await runTool(await helmBinary(), args);
  if (!r.ok) throw new Error(`helm ${args.join(' ')}: ${r.stderr}`);
  return parseObjects(r.stdout);
}

export async function kustomizeObjects(layout: 'crd' | 'aggregated'): Promise<Obj[]> {
  const cluster = await getTestCluster();
  const r = await runTool(cluster.binaries.kubectl ?? 'kubectl', ['kustomize', `${KUSTOMIZE}/overlays/${layout}`]);
  if (!r.ok) throw new Error(`kubectl kustomize overlays/${layout}: ${r.stderr}`);
  return parseObjects(r.stdout);
}

const RBAC_KINDS = new Set(['ServiceAccount', 'ClusterRole', 'ClusterRoleBinding', 'Role', 'RoleBinding']);

/**
 * The ServiceAccount, roles and bindings of `component` from rendered manifests, moved to `namespace` (the release
 * namespace's objects) and suffixed with `suffix` (the cluster-scoped and kube-node-lease ones), with `drop`
 * rules removed (a rule whose verbs all go is removed whole).
 */
export function isolateRbac(
  objects: Obj[],
  opts: { component: string; namespace: string; suffix: string; drop?: (rule: PolicyRule, role: Obj) => string[] },
): Obj[] {
  const releaseNs = objects.find((o) => o.kind === 'ServiceAccount' && o.metadata.name === opts.component)?.metadata
    .namespace;
  if (!releaseNs) throw new Error(`no ServiceAccount ${opts.component} in the rendered objects`);
  const rename = (name: string) => `${name}-${opts.suffix}`;
  const out: Obj[] = [];
  for (const o of objects) {
    if (!RBAC_KINDS.has(o.kind) || o.metadata.labels?.['app.kubernetes.io/name'] !== opts.component) continue;
    const copy = structuredClone(o);
    const inRelease = copy.metadata.namespace === releaseNs;
    if (inRelease) copy.metadata.namespace = opts.namespace;
    if (copy.kind !== 'ServiceAccount' && (!inRelease || copy.kind.startsWith('Cluster')))
      copy.metadata.name = rename(copy.metadata.name);
    if (copy.kind.endsWith('Binding')) {
      const ref = copy['roleRef'] as { kind: string; name: string };
      // Bindings to roles Kubernetes defines keep their roleRef; ours point at the renamed copies.
      if (objects.some((r) => r.kind === ref.kind && r.metadata.name === ref.name && r.kind.endsWith('Role')))
        ref.name = ref.kind === 'ClusterRole' || !inRelease ? rename(ref.name) : ref.name;
      for (const s of copy['subjects'] as Array<{ namespace?: string }>) s.namespace = opts.namespace;
    }
    if (opts.drop && (copy.kind === 'ClusterRole' || copy.kind === 'Role')) {
      const rules = (copy['rules'] as PolicyRule[]).map((r) => {
        const gone = new Set(opts.drop!(r, o));
        return { ...r, verbs: r.verbs.filter((v) => !gone.has(v)) };
      });
      copy['rules'] = rules.filter((r) => r.verbs.length > 0);
    }
    out.push(copy);
  }
  return out;
}

export const toYamlStream = (objects: Obj[]) => objects.map((o) => JSON.stringify(o)).join('\n---\n');

/**
 * A container's args as a process on this machine runs them: `$(VAR)` expanded from `env` (the downward API's
 * values), the flags in `override` given test-host values (paths, ports: each must be a flag the manifest passes,
 * so a renamed one fails here), then `add` appended.
 */
export function hostArgs(
  container: { args?: string[] },
  opts: { env?: Record<string, string>; override?: Record<string, string>; add?: string[] },
): string[] {
  const used = new Set<string>();
  const out = (container.args ?? []).map((arg) => {
    const m = /^--([^=]+)=(.*)$/s.exec(arg);
    if (!m) throw new Error(`manifest arg ${arg} is not --flag=value`);
    const [, name, value] = m as unknown as [string, string, string];
    if (opts.override && name in opts.override) {
      used.add(name);
      return `--${name}=${opts.override[name]}`;
    }
    return `--${name}=${value.replace(/\$\((\w+)\)/g, (_x, v: string) => {
      const got = opts.env?.[v];
      if (got === undefined) throw new Error(`manifest arg ${arg} needs $(${v})`);
      return got;
    })}`;
  });
  const missing = Object.keys(opts.override ?? {}).filter((k) => !used.has(k));
  if (missing.length) throw new Error(`the manifest passes no ${missing.map((k) => `--${k}`).join(', ')}`);
  return [...out, ...(opts.add ?? [])];
}

/** The first container of the Deployment or DaemonSet `name` among `objects`. */
export function containerOf(objects: Obj[], kind: 'Deployment' | 'DaemonSet', name: string) {
  const w = objects.find((o) => o.kind === kind && o.metadata.name === name);
  if (!w) throw new Error(`no ${kind} ${name} rendered`);
  const spec = w['spec'] as { template: { spec: { containers: Array<{ args?: string[]; env?: unknown[] }> } } };
  return spec.template.spec.containers[0]!;
}

/**
 * The image's /app on this machine: the src/ JS tsc emits (its exit status is the typecheck's business), the
 * files it reads at run time copied as the Dockerfile copies them, package.json and the dependencies.
 */
export async function buildImageApp(dir: string): Promise<string> {
  const app = join(dir, 'app');
  await mkdir(app);
  await cp(join(REPO, 'src'), join(app, 'src'), { recursive: true });
  await cp(join(REPO, 'package.json'), join(app, 'package.json'));
  await symlink(join(REPO, 'node_modules'), join(app, 'node_modules'));
  spawnSync(join(REPO, 'node_modules/.bin/tsc'), ['-p', 'tsconfig.build.json', '--outDir', join(app, 'dist')], {
    cwd: REPO,
  });
  const copied = spawnSync('sh', ['-c', COPY_RUNTIME_FILES], { cwd: app, encoding: 'utf8' });
  if (copied.status !== 0) throw new Error(`copying the runtime files: ${copied.stderr}`);
  return app;
}

/**
 * Run an image target's entrypoint (node <app>/<entrypoint> args) with the environment its image sets (`env`),
 * logged to <logDir>, stopped with `components`.
 */
export function launchEntrypoint(
  components: Components,
  app: string,
  target: keyof typeof IMAGE_TARGETS,
  args: string[],
  logDir: string,
  env: Record<string, string> = {},
): Component {
  const logPath = join(logDir, `${target}.log`);
  const child = spawn(process.execPath, [join(app, IMAGE_TARGETS[target].entrypoint), ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...env },
  });
  const log = createWriteStream(logPath);
  child.stdout.pipe(log);
  child.stderr.pipe(log);
  const c = { name: target, child, logPath };
  components.list.push(c);
  return c;
}

/** A kubeconfig with a token of ServiceAccount `namespace/name` on `cluster`. */
export async function serviceAccountConfig(
  cluster: Pick<ClusterHandle, 'kubectl' | 'server' | 'pki'>,
  namespace: string,
  name: string,
  dir: string,
): Promise<string> {
  return serviceAccountKubeconfig(cluster.kubectl, {
    path: join(dir, `${namespace}-${name}.kubeconfig`),
    server: cluster.server,
    caPem: await readFile(cluster.pki.ca.cert, 'utf8'),
    namespace,
    name,
  });
}

/** A selector-less Service and an EndpointSlice sending `name` to this machine (the local cluster has no kube-proxy). */
export function serviceToHost(namespace: string, name: string, host: string, port: number): Obj[] {
  return [
    {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name, namespace },
      spec: { ports: [{ name: 'https', port: 443, targetPort: port, protocol: 'TCP' }] },
    },
    {
      apiVersion: 'discovery.k8s.io/v1',
      kind: 'EndpointSlice',
      metadata: {
        name,
        namespace,
        labels: { 'kubernetes.io/service-name': name, 'endpointslice.kubernetes.io/managed-by': 'test' },
      },
      addressType: 'IPv4',
      endpoints: [{ addresses: [host], conditions: { ready: true } }],
      ports: [{ name: 'https', port, protocol: 'TCP' }],
    },
  ];
}

/**
 * Install what of the rendered `objects` a cluster without kubelets can hold: the CRDs (waited for until
 * Established), the namespace, and the objects of `kinds` (RBAC, ConfigMaps, Secrets); the workloads are run by
 * the test itself.
 */
export async function installChartObjects(
  kubectl: (args: string[], input?: string) => Promise<string>,
  objects: Obj[],
  namespace: string,
  kinds: readonly string[],
): Promise<void> {
  const crds = objects.filter((o) => o.kind === 'CustomResourceDefinition');
  await kubectl(['apply', '--server-side', '-f', '-'], toYamlStream(crds));
  await crdsEstablished(
    kubectl,
    crds.map((c) => c.metadata.name),
  );
  await kubectl(['create', 'namespace', namespace]);
  await kubectl(['apply', '-f', '-'], toYamlStream(objects.filter((o) => kinds.includes(o.kind))));
}

/**
 * Polled rather than `kubectl wait`: on a CRD created a moment ago kubectl 1.36's wait can fail outright with
 * ".status.conditions accessor error: <nil>" instead of waiting for the conditions to appear.
 */
async function crdsEstablished(kubectl: (args: string[]) => Promise<string>, names: string[]): Promise<void> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const list = JSON.parse(await kubectl(['get', 'crd', ...names, '-o', 'json'])) as {
      items: Array<{ metadata: { name: string }; status?: { conditions?: Array<{ type: string; status: string }> } }>;
    };
    const pending = list.items
      .filter((c) => !c.status?.conditions?.some((k) => k.type === 'Established' && k.status === 'True'))
      .map((c) => c.metadata.name);
    if (!pending.length) return;
    if (Date.now() > deadline) throw new Error(`CRDs not Established within 60 s: ${pending.join(', ')}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

export const RBAC_AND_CONFIG = [
  'ServiceAccount',
  'ClusterRole',
  'ClusterRoleBinding',
  'Role',
  'RoleBinding',
  'ConfigMap',
];

/**
 * The sandboxd image's environment on this machine: guest images exported as its guest stage exports them
 * (from this machine's cache) for SBX_GUEST_IMAGES, and a cache dir of its own for the VM templates.
 */
export async function sandboxdImageEnv(dir: string, templates: readonly string[]): Promise<Record<string, string>> {
  const images = join(dir, 'guest-images');
  exportGuestImages(images, await Promise.all(templates.map((t) => ensureGuestImage(t))));
  return { [PREBUILT_ENV]: images, SBX_CACHE_DIR: join(dir, 'sandboxd-cache') };
}
