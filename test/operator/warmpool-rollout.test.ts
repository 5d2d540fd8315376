import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { AnnotationKeys, fnv1a32, LabelKeys } from '../../src/api/index.js';
import { Sandboxes, SandboxTemplates, SandboxWarmPools } from '../../src/kube/index.js';
import { setTimeout as sleep } from 'node:timers/promises';
import { eventually } from '../support/eventually.js';
import {
  createAll,
  listSandboxes,
  poolManifest,
  setupEnv,
  templateManifest,
  waitPoolReady,
  type Env,
} from './claim-support.js';

const members = (env: Env, pool: string) => listSandboxes(env.ns, `${LabelKeys.warmPoolSandbox}=${fnv1a32(pool)}`);
const envOf = (sb: { spec: { podTemplate: { spec: { containers: Array<{ env?: Array<{ value?: string }> }> } } } }) =>
  sb.spec.podTemplate.spec.containers[0]!.env?.[0]?.value;
const setMode = (env: Env, tpl: string, value: string) =>
  env.client.patch(
    SandboxTemplates,
    env.ns,
    tpl,
    {
      spec: {
        podTemplate: {
          spec: { containers: [{ name: 'main', image: 'registry.k8s.io/pause:3.10', env: [{ name: 'MODE', value }] }] },
        },
      },
    },
    'merge',
  );

describe('SandboxWarmPool rollouts (spec §16 item 12, §14.2 TestWarmPoolRollout*)', () => {
  let env: Env;
  before(async () => {
    env = await setupEnv('rollout');
    await createAll(env.client, templateManifest(env.ns, 'a'), poolManifest(env.ns, 'on-replenish', 'a', 1));
    await createAll(
      env.client,
      undefined,
      poolManifest(env.ns, 'recreate', 'a', 1, { updateStrategy: { type: 'Recreate' } }),
    );
    await createAll(
      env.client,
      templateManifest(env.ns, 'b'),
      poolManifest(env.ns, 'other', 'b', 1, { updateStrategy: { type: 'Recreate' } }),
    );
    await Promise.all(['on-replenish', 'recreate', 'other'].map((p) => waitPoolReady(env.ns, p, 1)));
  });
  after(() => env?.stop());

  it('template change: Recreate replaces, OnReplenish keeps until deleted, other templates untouched', async () => {
    const [keep] = await members(env, 'on-replenish');
    const [old] = await members(env, 'recreate');
    const [otherBefore] = await members(env, 'other');
    await setMode(env, 'a', 'two');
    await eventually(() => members(env, 'recreate'), {
      until: (l) => l.length === 1 && l[0]!.metadata.name !== old!.metadata.name && envOf(l[0]!) === 'two',
      what: 'Recreate replacement with the new spec',
      timeoutMs: 30_000,
    });
    await sleep(500);
    const [stillKept] = await members(env, 'on-replenish');
    assert.equal(stillKept?.metadata.name, keep!.metadata.name, 'OnReplenish keeps the drifted member');
    assert.equal(envOf(stillKept!), 'one');
    const [otherAfter] = await members(env, 'other');
    assert.equal(otherAfter?.metadata.name, otherBefore!.metadata.name, 'pool of template b untouched');
    await env.client.delete(Sandboxes, env.ns, keep!.metadata.name!);
    await eventually(() => members(env, 'on-replenish'), {
      until: (l) => l.length === 1 && l[0]!.metadata.name !== keep!.metadata.name && envOf(l[0]!) === 'two',
      what: 'OnReplenish refill with the new spec',
    });
  });

  it('pod-template metadata changes never recreate (Recreate)', async () => {
    await waitPoolReady(env.ns, 'recreate', 1);
    const [before] = await members(env, 'recreate');
    await env.client.patch(
      SandboxTemplates,
      env.ns,
      'a',
      { spec: { podTemplate: { metadata: { labels: { extra: 'yes' } } } } },
      'merge',
    );
    await sleep(1500);
    const [afterM] = await members(env, 'recreate');
    assert.equal(afterM?.metadata.name, before!.metadata.name);
  });

  it('an orphan made for another template name is replaced, even when its spec is identical (§8 step 2)', async () => {
    await createAll(env.client, templateManifest(env.ns, 'c'), poolManifest(env.ns, 'orphans', 'c', 1));
    await waitPoolReady(env.ns, 'orphans', 1);
    const [member] = await members(env, 'orphans');
    assert.equal(member!.metadata.labels?.[LabelKeys.sandboxTemplateRefHash], fnv1a32('c'));
    // OnReplenish: an owned member of the old template is kept when the pool moves to the spec-identical c2 ...
    await env.client.create(SandboxTemplates, templateManifest(env.ns, 'c2'));
    await env.client.patch(
      SandboxWarmPools,
      env.ns,
      'orphans',
      { spec: { sandboxTemplateRef: { name: 'c2' } } },
      'merge',
    );
    await sleep(1000);
    assert.equal((await members(env, 'orphans'))[0]?.metadata.name, member!.metadata.name, 'kept while owned');
    // ... but once it is an orphan, it is stale for its template name and replaced rather than adopted.
    await env.client.patch(Sandboxes, env.ns, member!.metadata.name!, { metadata: { ownerReferences: null } }, 'merge');
    const [replacement] = await eventually(() => members(env, 'orphans'), {
      until: (l) => l.length === 1 && l[0]!.metadata.name !== member!.metadata.name,
      what: 'the orphan replaced by a member of c2',
      timeoutMs: 30_000,
    });
    assert.equal(replacement!.metadata.labels?.[LabelKeys.sandboxTemplateRefHash], fnv1a32('c2'));
  });

  it('switching the pool to an identical template B recreates the member, annotated with B', async () => {
    const [before] = await members(env, 'other');
    await env.client.create(SandboxTemplates, templateManifest(env.ns, 'b2'));
    await env.client.patch(
      SandboxWarmPools,
      env.ns,
      'other',
      { spec: { sandboxTemplateRef: { name: 'b2' } } },
      'merge',
    );
    const [after] = await eventually(() => members(env, 'other'), {
      until: (l) => l.length === 1 && l[0]!.metadata.name !== before!.metadata.name,
      what: 'member recreated for b2',
    });
    assert.equal(after!.metadata.annotations?.[AnnotationKeys.sandboxTemplateRef], 'b2');
  });
});
