/**
 * `SandboxClaim.status.sandbox.serviceFQDN` (upstream 1.0): both served versions' schemas keep it (the apiserver
 * prunes what a schema does not know), conversion carries it both ways, and the claim status mirrors the bound
 * Sandbox's `status.serviceFQDN` and drops it when the claim no longer has that Sandbox. The control-plane side is
 * test/operator/claim-ready-moment.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { buildAllCrds, type JsonSchemaProps } from '../../src/api/crd.js';
import { convertObject, type Sandbox, type SandboxClaim } from '../../src/api/index.js';
import { claimStatusFor } from '../../src/api/claim-status.js';
import { validateStructural } from '../../src/api/structural-validate.js';

const FQDN = 'pool-x7k2q.team-a.svc.cluster.local';
const BETA = 'extensions.agents.x-k8s.io/v1beta1';
const ALPHA = 'extensions.agents.x-k8s.io/v1alpha1';
const NOW = '2026-12-03T12:00:00Z';

const claimCrd = buildAllCrds().find(
  (c) => (c['metadata'] as { name: string }).name === 'sandboxclaims.extensions.agents.x-k8s.io',
)!;
const schemaOf = (version: string): JsonSchemaProps => {
  const versions = (claimCrd['spec'] as { versions: Array<Record<string, unknown>> }).versions;
  const v = versions.find((x) => x['name'] === version)!;
  return (v['schema'] as { openAPIV3Schema: JsonSchemaProps }).openAPIV3Schema;
};

function betaClaim(sandbox: NonNullable<NonNullable<SandboxClaim['status']>['sandbox']>): SandboxClaim {
  return {
    apiVersion: BETA,
    kind: 'SandboxClaim',
    metadata: { name: 'c', namespace: 'team-a', uid: 'u-1', generation: 1 },
    spec: { warmPoolRef: { name: 'pool' } },
    status: { sandbox },
  };
}

function sandbox(name: string, serviceFQDN?: string): Sandbox {
  return {
    apiVersion: 'agents.x-k8s.io/v1beta1',
    kind: 'Sandbox',
    metadata: { name, namespace: 'team-a' },
    spec: { podTemplate: { spec: { containers: [{ name: 'main', image: 'x' }] } } },
    status: {
      podIPs: ['10.0.0.7'],
      conditions: [
        { type: 'Ready', status: 'True', reason: 'DependenciesReady', message: '', lastTransitionTime: NOW },
      ],
      ...(serviceFQDN ? { service: name, serviceFQDN } : {}),
    },
  } as Sandbox;
}

describe('SandboxClaim status.sandbox.serviceFQDN', () => {
  for (const version of ['v1alpha1', 'v1beta1'])
    it(`the ${version} schema knows it as a string (not pruned)`, () => {
      const obj = {
        ...betaClaim({ name: 'pool-x7k2q', serviceFQDN: FQDN }),
        apiVersion: `extensions.agents.x-k8s.io/${version}`,
        ...(version === 'v1alpha1' ? { spec: { sandboxTemplateRef: { name: 'tpl' } } } : {}),
      };
      const r = validateStructural(schemaOf(version), obj);
      assert.deepEqual(r.unknown, []);
      assert.deepEqual(r.errors, []);
      const bad = validateStructural(schemaOf(version), { ...obj, status: { sandbox: { serviceFQDN: 7 } } });
      assert.deepEqual(
        bad.errors.map((e) => e.field),
        ['status.sandbox.serviceFQDN'],
      );
    });

  it('round-trips v1beta1 -> v1alpha1 -> v1beta1 and v1alpha1 -> v1beta1 -> v1alpha1', () => {
    const hub = JSON.parse(JSON.stringify(betaClaim({ name: 'pool-x7k2q', serviceFQDN: FQDN }))) as Record<
      string,
      unknown
    >;
    const view = convertObject(hub, ALPHA);
    assert.equal((view['status'] as SandboxClaim['status'])?.sandbox?.serviceFQDN, FQDN);
    assert.deepEqual(convertObject(view, BETA), hub);
    const back = convertObject(convertObject(view, BETA), ALPHA);
    assert.deepEqual(back, view);
  });

  it('is mirrored from the bound Sandbox and cleared when the claim no longer has it', () => {
    const claim = betaClaim({ name: 'pool-x7k2q' });
    const bound = claimStatusFor(claim, { kind: 'sandbox', sandbox: sandbox('pool-x7k2q', FQDN) }, NOW);
    assert.deepEqual(bound.sandbox, { name: 'pool-x7k2q', podIPs: ['10.0.0.7'], serviceFQDN: FQDN });

    const withFqdn: SandboxClaim = { ...claim, status: bound };
    // The Sandbox's Service went away (spec.service false): the claim follows.
    const noService = claimStatusFor(withFqdn, { kind: 'sandbox', sandbox: sandbox('pool-x7k2q') }, NOW);
    assert.deepEqual(noService.sandbox, { name: 'pool-x7k2q', podIPs: ['10.0.0.7'] });
    // Bound anew to a Sandbox without a Service: nothing of the old one stays.
    const rebound = claimStatusFor(withFqdn, { kind: 'sandbox', sandbox: sandbox('pool-b2c3d') }, NOW);
    assert.deepEqual(rebound.sandbox, { name: 'pool-b2c3d', podIPs: ['10.0.0.7'] });
    // No Sandbox at all.
    assert.equal(claimStatusFor(withFqdn, { kind: 'noSandbox' }, NOW).sandbox, undefined);
    // Expired and its Sandbox gone (Retain deleted it): the name stays, the Service's name does not.
    const expired = claimStatusFor(withFqdn, { kind: 'expired', sandbox: undefined }, NOW);
    assert.deepEqual(expired.sandbox, { name: 'pool-x7k2q', podIPs: ['10.0.0.7'] });
    // A transient error keeps what the claim had, as for name and podIPs.
    const transient = claimStatusFor(
      withFqdn,
      { kind: 'error', reason: 'ReconcilerError', message: 'Error seen: x', keepSandboxStatus: true },
      NOW,
    );
    assert.equal(transient.sandbox?.serviceFQDN, FQDN);
  });
});
