/**
 * Registering sandbox-apiserver with a cluster's aggregator (the aggregated layout, docs/aggregated-layout.md):
 * the RBAC it needs (deploy/aggregated/rbac.yaml), a Service without selector and an EndpointSlice pointing at the
 * address where the server listens (this machine's end of the cluster's veth pair: the local control plane has no
 * kube-proxy, so kube-apiserver runs with --enable-aggregator-routing and dials the endpoint), and the APIService
 * `v1beta1.agents.x-k8s.io` with the server's CA. Used by `sbx up --layout aggregated` and the tests alike.
 */
import { writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { stringify } from 'yaml';
import { SandboxError } from '../errors.js';

type Kubectl = (args: string[], input?: string) => Promise<string>;

export const APISERVICE_NAME = 'v1beta1.agents.x-k8s.io';
/** The CRD the aggregated layout leaves out: the APIService serves agents.x-k8s.io/v1beta1 sandboxes instead. */
export const SANDBOX_CRD = 'sandboxes.agents.x-k8s.io';
export const AGGREGATED_RBAC = fileURLToPath(new URL('../../deploy/aggregated/rbac.yaml', import.meta.url));

export interface Registration {
  /** Where the server listens, as the aggregator must dial it (an IPv4 address). */
  address: string;
  port: number;
  caPem: string;
  namespace?: string;
  service?: string;
}

export function registrationManifests(r: Registration): string {
  const namespace = r.namespace ?? 'sandbox-system';
  const service = r.service ?? 'sandbox-apiserver';
  const objects = [
    {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: service, namespace },
      spec: { ports: [{ name: 'https', port: 443, targetPort: r.port, protocol: 'TCP' }] },
    },
    {
      apiVersion: 'discovery.k8s.io/v1',
      kind: 'EndpointSlice',
      metadata: {
        name: service,
        namespace,
        labels: { 'kubernetes.io/service-name': service, 'endpointslice.kubernetes.io/managed-by': 'sbx' },
      },
      addressType: 'IPv4',
      endpoints: [{ addresses: [r.address], conditions: { ready: true } }],
      ports: [{ name: 'https', port: r.port, protocol: 'TCP' }],
    },
    {
      apiVersion: 'apiregistration.k8s.io/v1',
      kind: 'APIService',
      metadata: { name: APISERVICE_NAME },
      spec: {
        group: 'agents.x-k8s.io',
        version: 'v1beta1',
        service: { namespace, name: service, port: 443 },
        caBundle: Buffer.from(r.caPem).toString('base64'),
        groupPriorityMinimum: 1000,
        versionPriority: 15,
      },
    },
  ];
  return objects.map((o) => stringify(o)).join('---\n');
}

export async function applyAggregatedRbac(kubectl: Kubectl): Promise<void> {
  await kubectl(['apply', '--server-side', '--force-conflicts', '-f', AGGREGATED_RBAC]);
}

/** Apply the registration and wait until the aggregator reports the APIService Available. */
export async function registerAggregatedApi(kubectl: Kubectl, r: Registration, timeoutMs = 60_000): Promise<number> {
  const started = Date.now();
  await kubectl(['apply', '--server-side', '--force-conflicts', '-f', '-'], registrationManifests(r));
  let last = '';
  while (Date.now() - started < timeoutMs) {
    const out = await kubectl([
      'get',
      'apiservice',
      APISERVICE_NAME,
      '-o',
      "jsonpath={.status.conditions[?(@.type=='Available')].status} {.status.conditions[?(@.type=='Available')].message}",
    ]).catch((err: unknown) => String(err));
    if (out.startsWith('True')) return Date.now() - started;
    last = out;
    await sleep(200);
  }
  throw new SandboxError(
    'cluster.apiservice',
    `APIService ${APISERVICE_NAME} not Available after ${timeoutMs} ms: ${last}`,
    {
      hint: 'check that sandbox-apiserver listens on the registered address and that /readyz passes',
    },
  );
}

/**
 * A kubeconfig for a ServiceAccount (a bound token from the TokenRequest API), so a component runs with exactly
 * the RBAC its manifests grant instead of the admin certificate.
 */
export async function serviceAccountKubeconfig(
  kubectl: Kubectl,
  opts: { path: string; server: string; caPem: string; namespace: string; name: string; hours?: number },
): Promise<string> {
  const token = (
    await kubectl(['create', 'token', opts.name, '-n', opts.namespace, `--duration=${opts.hours ?? 24}h`])
  ).trim();
  const config = {
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [
      {
        name: 'sbx',
        cluster: { server: opts.server, 'certificate-authority-data': Buffer.from(opts.caPem).toString('base64') },
      },
    ],
    users: [{ name: opts.name, user: { token } }],
    contexts: [{ name: 'sbx', context: { cluster: 'sbx', user: opts.name, namespace: opts.namespace } }],
    'current-context': 'sbx',
  };
  await writeFile(opts.path, stringify(config), { mode: 0o600 });
  return opts.path;
}
