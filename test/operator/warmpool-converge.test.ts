import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { AnnotationKeys, fnv1a32, LabelKeys } from '../../src/api/index.js';
import { SandboxWarmPools, Sandboxes } from '../../src/kube/index.js';
import { eventually } from '../support/eventually.js';
import {
  createAll,
  getPool,
  listSandboxes,
  poolManifest,
  setupEnv,
  templateManifest,
  waitPoolReady,
  type Env,
} from './claim-support.js';

describe('SandboxWarmPool convergence (spec §16 items 10, 11)', () => {
  let env: Env;
  before(async () => {
    env = await setupEnv('warmpool');
    await createAll(env.client, templateManifest(env.ns, 'tpl'), poolManifest(env.ns, 'pool', 'tpl', 3));
  });
  after(() => env?.stop());

  it('creates replicas members of the documented shape and reports them in status', async () => {
    const pool = await waitPoolReady(env.ns, 'pool', 3);
    assert.equal(pool.status?.selector, `${LabelKeys.warmPoolSandbox}=${fnv1a32('pool')}`);
    assert.equal(pool.status?.observedGeneration, pool.metadata.generation);
    const members = await listSandboxes(env.ns, pool.status!.selector);
    assert.equal(members.length, 3);
    for (const m of members) {
      assert.match(m.metadata.name!, /^pool-/);
      const ref = m.metadata.ownerReferences?.find((r) => r.controller);
      assert.equal(ref?.uid, pool.metadata.uid);
      assert.equal(ref?.blockOwnerDeletion, true);
      assert.equal(m.metadata.labels?.[LabelKeys.launchType], 'warm');
      assert.equal(m.metadata.labels?.[LabelKeys.createdBy], 'controller');
      assert.equal(m.metadata.labels?.[LabelKeys.sandboxTemplateRefHash], fnv1a32('tpl'));
      assert.ok(m.metadata.labels?.[LabelKeys.sandboxTemplateHash]);
      assert.equal(m.metadata.annotations?.[AnnotationKeys.sandboxTemplateRef], 'tpl');
      assert.equal(m.spec.podTemplate.metadata?.annotations?.[AnnotationKeys.safeToEvict], 'true');
      assert.equal(m.spec.podTemplate.spec.automountServiceAccountToken, false);
    }
  });

  it('scales through the scale subresource, up and down', async () => {
    await env.client.patch(SandboxWarmPools, env.ns, 'pool', { spec: { replicas: 5 } }, 'merge', {
      subresource: 'scale',
    });
    await waitPoolReady(env.ns, 'pool', 5);
    const scale = await env.client.get<{
      metadata: object;
      spec: { replicas: number };
      status: { replicas: number; selector: string };
    }>(SandboxWarmPools, env.ns, 'pool', 'scale');
    assert.equal(scale.spec.replicas, 5);
    assert.equal(scale.status.replicas, 5);
    assert.equal(scale.status.selector, `${LabelKeys.warmPoolSandbox}=${fnv1a32('pool')}`);
    await env.client.patch(SandboxWarmPools, env.ns, 'pool', { spec: { replicas: 1 } }, 'merge', {
      subresource: 'scale',
    });
    await waitPoolReady(env.ns, 'pool', 1);
    await eventually(() => listSandboxes(env.ns, `${LabelKeys.warmPoolSandbox}=${fnv1a32('pool')}`), {
      until: (l) => l.filter((s) => !s.metadata.deletionTimestamp).length === 1,
      what: 'one member left',
    });
  });

  it('replaces a deleted member', async () => {
    const [m] = await listSandboxes(env.ns, `${LabelKeys.warmPoolSandbox}=${fnv1a32('pool')}`);
    await env.client.delete(Sandboxes, env.ns, m!.metadata.name!);
    await eventually(() => listSandboxes(env.ns, `${LabelKeys.warmPoolSandbox}=${fnv1a32('pool')}`), {
      until: (l) => l.length === 1 && l[0]!.metadata.name !== m!.metadata.name,
      what: 'replacement',
    });
    await waitPoolReady(env.ns, 'pool', 1);
  });

  it('a pool whose template is missing writes status and creates nothing', async () => {
    await env.client.create(SandboxWarmPools, poolManifest(env.ns, 'orphan-pool', 'no-such-template', 2));
    const p = await eventually(() => getPool(env.ns, 'orphan-pool'), {
      until: (p) => p.status?.selector !== undefined,
      what: 'status',
    });
    assert.equal(p.status?.replicas, 0);
    assert.equal((await listSandboxes(env.ns, `${LabelKeys.warmPoolSandbox}=${fnv1a32('orphan-pool')}`)).length, 0);
  });
});
