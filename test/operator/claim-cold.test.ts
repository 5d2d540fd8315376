import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { AnnotationKeys, fnv1a32, LabelKeys } from '../../src/api/index.js';
import { Pods, SandboxClaims, SandboxTemplates, type KubeObject } from '../../src/kube/index.js';
import { eventually } from '../support/eventually.js';
import {
  claimManifest,
  cond,
  createAll,
  getSandboxOrUndefined,
  poolManifest,
  setupEnv,
  templateManifest,
  waitClaim,
  waitPoolReady,
  type Env,
} from './claim-support.js';

describe('SandboxClaim cold path, injection and bad input (spec §16 items 16–19)', () => {
  let env: Env;
  before(async () => {
    env = await setupEnv('claim-cold');
    await createAll(env.client, templateManifest(env.ns, 'tpl'), poolManifest(env.ns, 'empty', 'tpl', 0));
    await createAll(
      env.client,
      templateManifest(env.ns, 'allowed', { envVarsInjectionPolicy: 'Allowed', volumeClaimTemplatesPolicy: 'Allowed' }),
      poolManifest(env.ns, 'allowed-pool', 'allowed', 1),
    );
    await createAll(
      env.client,
      templateManifest(env.ns, 'overrides', { envVarsInjectionPolicy: 'Overrides' }),
      poolManifest(env.ns, 'overrides-pool', 'overrides', 0),
    );
    await waitPoolReady(env.ns, 'allowed-pool', 1);
  });
  after(() => env?.stop());

  it('an empty pool cold-starts a Sandbox named after the claim', async () => {
    const c = await env.client.create(SandboxClaims, claimManifest(env.ns, 'cold1', 'empty'));
    const claim = await waitClaim(env.ns, 'cold1');
    assert.equal(claim.status?.sandbox?.name, 'cold1');
    const sb = (await getSandboxOrUndefined(env.ns, 'cold1'))!;
    assert.equal(sb.metadata.labels?.[LabelKeys.launchType], 'cold');
    assert.equal(sb.metadata.labels?.[LabelKeys.claimUid], c.metadata.uid);
    assert.equal(sb.metadata.labels?.[LabelKeys.sandboxTemplateRefHash], fnv1a32('tpl'));
    assert.equal(sb.metadata.annotations?.[AnnotationKeys.sandboxTemplateRef], 'tpl');
    assert.equal(sb.metadata.ownerReferences?.[0]?.uid, c.metadata.uid);
    assert.equal(sb.spec.podTemplate.spec.automountServiceAccountToken, false);
    assert.equal(sb.spec.podTemplate.spec.dnsPolicy, 'None');
    assert.deepEqual(sb.spec.podTemplate.spec.dnsConfig, { nameservers: ['8.8.8.8', '1.1.1.1'] });
  });

  it('env forces a cold start even with warm members; Allowed appends, Overrides replaces', async () => {
    await env.client.create(
      SandboxClaims,
      claimManifest(env.ns, 'env-allowed', 'allowed-pool', { env: [{ name: 'EXTRA', value: 'x' }] }),
    );
    await env.client.create(
      SandboxClaims,
      claimManifest(env.ns, 'env-over', 'overrides-pool', { env: [{ name: 'MODE', value: 'override' }] }),
    );
    const a = await waitClaim(env.ns, 'env-allowed');
    assert.equal(a.status?.sandbox?.name, 'env-allowed');
    const sa = (await getSandboxOrUndefined(env.ns, 'env-allowed'))!;
    assert.deepEqual(sa.spec.podTemplate.spec.containers[0]!.env, [
      { name: 'MODE', value: 'one' },
      { name: 'EXTRA', value: 'x' },
    ]);
    await waitClaim(env.ns, 'env-over');
    const so = (await getSandboxOrUndefined(env.ns, 'env-over'))!;
    assert.deepEqual(so.spec.podTemplate.spec.containers[0]!.env, [{ name: 'MODE', value: 'override' }]);
    await waitPoolReady(env.ns, 'allowed-pool', 1);
  });

  it('accepted additionalPodMetadata lands on the pod template and the Pod', async () => {
    await env.client.create(
      SandboxClaims,
      claimManifest(env.ns, 'meta-ok', 'allowed-pool', {
        additionalPodMetadata: { labels: { 'sandbox.users.io/team': 'blue' }, annotations: { note: 'hi' } },
      }),
    );
    const claim = await waitClaim(env.ns, 'meta-ok');
    const sbName = claim.status!.sandbox!.name!;
    const sb = (await getSandboxOrUndefined(env.ns, sbName))!;
    assert.equal(sb.spec.podTemplate.metadata?.labels?.['sandbox.users.io/team'], 'blue');
    await eventually(() => env.client.get<KubeObject>(Pods, env.ns, sbName), {
      until: (p) => p.metadata.labels?.['sandbox.users.io/team'] === 'blue' && p.metadata.annotations?.note === 'hi',
      what: 'metadata on the Pod',
    });
  });

  it('bad input gets its documented reason and never blocks other claims', async () => {
    const bad: Array<[string, ReturnType<typeof claimManifest>, string]> = [
      ['no-pool', claimManifest(env.ns, 'no-pool', 'missing-pool'), 'WarmPoolNotFound'],
      ['no-template', claimManifest(env.ns, 'no-template', 'shadow-pool-missing-template'), 'TemplateNotFound'],
      [
        'bad-meta',
        claimManifest(env.ns, 'bad-meta', 'empty', { additionalPodMetadata: { labels: { team: 'x' } } }),
        'InvalidMetadata',
      ],
      [
        'bad-annot',
        claimManifest(env.ns, 'bad-annot', 'empty', {
          additionalPodMetadata: { annotations: { 'kubernetes.io/x': 'y' } },
        }),
        'InvalidMetadata',
      ],
      [
        'env-disallowed',
        claimManifest(env.ns, 'env-disallowed', 'empty', { env: [{ name: 'A', value: '1' }] }),
        'EnvVarsInjectionRejected',
      ],
      [
        'dup-vct',
        claimManifest(env.ns, 'dup-vct', 'allowed-pool', {
          volumeClaimTemplates: [
            {
              metadata: { name: 'w' },
              spec: { accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '1Gi' } } },
            },
            {
              metadata: { name: 'w' },
              spec: { accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '1Gi' } } },
            },
          ],
        }),
        'VolumeClaimTemplatesError',
      ],
      [
        'vct-disallowed',
        claimManifest(env.ns, 'vct-disallowed', 'empty', {
          volumeClaimTemplates: [{ metadata: { name: 'w' }, spec: {} }],
        }),
        'VolumeClaimTemplatesError',
      ],
    ];
    for (const [, manifest] of bad) await env.client.create(SandboxClaims, manifest);
    await env.client.create(SandboxClaims, claimManifest(env.ns, 'good-after-bad', 'allowed-pool'));
    await waitClaim(env.ns, 'good-after-bad');
    for (const [name, , reason] of bad) {
      const c = await waitClaim(env.ns, name, reason);
      assert.equal(cond(c)?.status, 'False', name);
      assert.equal(c.status?.sandbox?.name, undefined, name);
    }
    assert.equal(
      cond(await waitClaim(env.ns, 'no-pool', 'WarmPoolNotFound'))?.message,
      'SandboxWarmPool "missing-pool" not found',
    );
  });

  it('a shadow-pool claim with no such pool falls back to the template it names', async () => {
    await env.client.create(SandboxClaims, claimManifest(env.ns, 'shadow', 'shadow-pool-tpl'));
    const claim = await waitClaim(env.ns, 'shadow');
    assert.equal(claim.status?.sandbox?.name, 'shadow');
  });

  it('a claim waiting for its template recovers when the template appears', async () => {
    await env.client.create(SandboxClaims, claimManifest(env.ns, 'late', 'shadow-pool-late-tpl'));
    await waitClaim(env.ns, 'late', 'TemplateNotFound');
    await env.client.create(SandboxTemplates, templateManifest(env.ns, 'late-tpl'));
    // No template watch (spec §9): the claim is retried on its 1-minute requeue, or on any claim event.
    await env.client.patch(SandboxClaims, env.ns, 'late', { metadata: { labels: { poke: '1' } } }, 'merge');
    await waitClaim(env.ns, 'late');
  });
});
