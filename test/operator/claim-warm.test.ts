import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { AnnotationKeys, fnv1a32, LabelKeys } from '../../src/api/index.js';
import { setTimeout as sleep } from 'node:timers/promises';
import { Pods, Sandboxes, SandboxClaims, type KubeObject } from '../../src/kube/index.js';
import { eventually } from '../support/eventually.js';
import {
  PAUSE,
  claimManifest,
  cond,
  createAll,
  getSandboxOrUndefined,
  listSandboxes,
  poolManifest,
  setupEnv,
  templateManifest,
  waitClaim,
  waitPoolReady,
  type Env,
} from './claim-support.js';

describe('SandboxClaim warm adoption (spec §16 items 13–15, 19)', () => {
  let env: Env;
  before(async () => {
    env = await setupEnv('claim-warm');
    await createAll(env.client, templateManifest(env.ns, 'tpl'), poolManifest(env.ns, 'pool', 'tpl', 2));
    await waitPoolReady(env.ns, 'pool', 2);
  });
  after(() => env?.stop());

  it('adopts a warm member; the pool refills', async () => {
    const members = await listSandboxes(env.ns, `${LabelKeys.warmPoolSandbox}=${fnv1a32('pool')}`);
    assert.equal(members.length, 2);
    const created = await env.client.create(
      SandboxClaims,
      claimManifest(env.ns, 'c1', 'pool', {}, { labels: { [LabelKeys.createdBy]: 'go-client' } }),
    );
    const claim = await waitClaim(env.ns, 'c1');
    const sbName = claim.status?.sandbox?.name;
    assert.ok(sbName && members.some((m) => m.metadata.name === sbName), 'bound to a former warm member');
    const sb = (await getSandboxOrUndefined(env.ns, sbName))!;
    const refs = sb.metadata.ownerReferences ?? [];
    assert.equal(refs.length, 1);
    assert.deepEqual(
      {
        kind: refs[0]!.kind,
        uid: refs[0]!.uid,
        controller: refs[0]!.controller,
        blockOwnerDeletion: refs[0]!.blockOwnerDeletion,
      },
      { kind: 'SandboxClaim', uid: created.metadata.uid, controller: true, blockOwnerDeletion: true },
    );
    const l = sb.metadata.labels ?? {};
    assert.equal(l[LabelKeys.warmPoolSandbox], undefined);
    assert.equal(l[LabelKeys.sandboxTemplateHash], undefined);
    assert.equal(l[LabelKeys.launchType], 'warm');
    assert.equal(l[LabelKeys.claimUid], created.metadata.uid);
    assert.equal(l[LabelKeys.createdBy], 'go-client');
    assert.equal(sb.spec.podTemplate.metadata?.labels?.[LabelKeys.claimUid], created.metadata.uid);
    assert.equal(sb.spec.podTemplate.metadata?.annotations?.[AnnotationKeys.safeToEvict], undefined);
    assert.equal(sb.metadata.annotations?.[AnnotationKeys.podName], sbName);
    assert.equal(cond(claim)?.reason, cond(sb)?.reason);
    // A claim seen Ready already names its Sandbox (spec §9.1; the watch-level check is claim-ready-moment.test.ts).
    assert.equal(claim.metadata.annotations?.[AnnotationKeys.sandboxName], sbName);
    assert.ok(claim.metadata.annotations?.[AnnotationKeys.controllerFirstObservedAt]);
    // The Pod keeps its UID and loses the pool label.
    const pod = await eventually(() => env.client.get<KubeObject>(Pods, env.ns, sbName), {
      until: (p) => p.metadata.labels?.[LabelKeys.warmPoolSandbox] === undefined,
      what: 'pod relabelled',
    });
    assert.ok(pod.metadata.uid);
    await waitPoolReady(env.ns, 'pool', 2);
  });

  it('a claim whose pod metadata conflicts with the template strands no warm member; a valid claim still adopts one', async () => {
    const team = 'sandbox.users.io/team';
    await createAll(
      env.client,
      templateManifest(env.ns, 'tpl-team', {
        podTemplate: {
          metadata: { labels: { app: 'agent', [team]: 'a' } },
          spec: { containers: [{ name: 'main', image: PAUSE }] },
        },
      }),
      poolManifest(env.ns, 'pool-team', 'tpl-team', 2),
    );
    await waitPoolReady(env.ns, 'pool-team', 2);
    const members = await listSandboxes(env.ns, `${LabelKeys.warmPoolSandbox}=${fnv1a32('pool-team')}`);
    assert.equal(members.length, 2);
    await env.client.create(
      SandboxClaims,
      claimManifest(env.ns, 'bad', 'pool-team', { additionalPodMetadata: { labels: { [team]: 'b' } } }),
    );
    const bad = await waitClaim(env.ns, 'bad', 'ReconcilerError');
    assert.equal(
      cond(bad)?.message,
      `Error seen: metadata override conflict: label "${team}" is defined in template with value "a", but claim requests "b"`,
    );
    // Several backoff retries (5 ms doubling): each one used to strand a warm member.
    await sleep(3000);
    const c = await env.client.create(SandboxClaims, claimManifest(env.ns, 'good', 'pool-team'));
    const good = await waitClaim(env.ns, 'good');
    const sbName = good.status?.sandbox?.name;
    assert.ok(
      sbName && members.some((m) => m.metadata.name === sbName),
      `bound to a former warm member, not ${sbName}`,
    );
    const sb = (await getSandboxOrUndefined(env.ns, sbName))!;
    assert.equal(sb.metadata.labels?.[LabelKeys.launchType], 'warm');
    assert.equal(sb.metadata.labels?.[LabelKeys.claimUid], c.metadata.uid);
    assert.equal(sb.spec.podTemplate.metadata?.labels?.[team], 'a');
    await env.client.delete(SandboxClaims, env.ns, 'bad'); // stops its retries
  });

  it('a claim whose Sandbox is deleted gets another one instead of staying Ready on the deleted one', async () => {
    await waitPoolReady(env.ns, 'pool', 2);
    const c = await env.client.create(SandboxClaims, claimManifest(env.ns, 'c-del', 'pool'));
    const first = (await waitClaim(env.ns, 'c-del')).status!.sandbox!.name!;
    await env.client.delete(Sandboxes, env.ns, first);
    await eventually(() => getSandboxOrUndefined(env.ns, first), { until: (s) => !s, what: `${first} deleted` });
    // docs/claim-model.md "The pass", step 4: nothing is bound any more, so the claim adopts (or creates) another.
    const claim = await eventually(() => env.client.get<typeof c>(SandboxClaims, env.ns, 'c-del'), {
      timeoutMs: 30_000,
      what: 'claim bound to a new Sandbox',
      until: (x) => !!x.status?.sandbox?.name && x.status.sandbox.name !== first && cond(x)?.status === 'True',
    });
    const sb = (await getSandboxOrUndefined(env.ns, claim.status!.sandbox!.name!))!;
    assert.ok(sb, 'the new Sandbox exists');
    assert.equal(sb.metadata.ownerReferences?.find((r) => r.controller)?.uid, c.metadata.uid);
  });
});
