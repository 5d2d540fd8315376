/**
 * What the claim gateway tests need in a namespace: a ServiceAccount `claimer` allowed to create SandboxClaims
 * there (Role and RoleBinding `claimer`), a SandboxTemplate `tpl` of the nodes' own pool (sandbox/minimal, small,
 * no network) with SandboxWarmPool `pool`, and a pool `unserved` whose key (size xlarge) no node keeps. Both pools
 * have 0 replicas, so the warm-pool driver never takes over the nodes' own pools for this test.
 */
import type { SandboxClaim } from '../../src/api/index.js';
import type { ObjectMeta } from '../../src/api/meta.js';
import { TEST_TEMPLATE } from './aggregated.js';

export type ClaimObj = SandboxClaim & { metadata: ObjectMeta };

type Kubectl = (args: string[], input?: string) => Promise<string>;

const EXT = 'extensions.agents.x-k8s.io/v1beta1';

/** Set up `namespace`; returns a token of the ServiceAccount `claimer`. */
export async function claimGatewayFixture(kubectl: Kubectl, namespace: string): Promise<string> {
  const template = (name: string, annotations: Record<string, string> = {}) => ({
    apiVersion: EXT,
    kind: 'SandboxTemplate',
    metadata: { name, annotations },
    spec: { podTemplate: { spec: { containers: [{ name: 'main', image: TEST_TEMPLATE }] } } },
  });
  const pool = (name: string, tpl: string) => ({
    apiVersion: EXT,
    kind: 'SandboxWarmPool',
    metadata: { name },
    spec: { replicas: 0, sandboxTemplateRef: { name: tpl } },
  });
  const objects = [
    template('tpl'),
    template('tpl-xl', { 'sandbox.cocoonstack.io/size': 'xlarge' }),
    pool('pool', 'tpl'),
    pool('unserved', 'tpl-xl'),
  ];
  await kubectl(['apply', '-n', namespace, '-f', '-'], objects.map((o) => JSON.stringify(o)).join('\n'));
  await kubectl(['create', 'serviceaccount', 'claimer', '-n', namespace]);
  await kubectl([
    'create',
    'role',
    'claimer',
    '-n',
    namespace,
    '--verb=create',
    '--resource=sandboxclaims.extensions.agents.x-k8s.io',
  ]);
  await kubectl([
    'create',
    'rolebinding',
    'claimer',
    '-n',
    namespace,
    '--role=claimer',
    `--serviceaccount=${namespace}:claimer`,
  ]);
  return (await kubectl(['create', 'token', 'claimer', '-n', namespace, '--duration=2h'])).trim();
}

/** One claim on a claim gateway (`host:port`) by bearer token; `body` as JSON, or a raw string. */
export async function gatewayClaim(
  address: string,
  token: string,
  body: unknown,
): Promise<{ status: number; json: Record<string, unknown>; headers: Headers; ms: number }> {
  const t0 = performance.now();
  const res = await fetch(`http://${address}/v1/claim`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  const ms = performance.now() - t0;
  let json: Record<string, unknown>;
  try {
    json = JSON.parse(text) as Record<string, unknown>;
  } catch {
    json = { raw: text };
  }
  return { status: res.status, json, headers: res.headers, ms };
}
