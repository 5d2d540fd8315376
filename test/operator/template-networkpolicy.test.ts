import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { fnv1a32, LabelKeys } from '../../src/api/index.js';
import { isNotFound, NetworkPolicies, SandboxTemplates, type KubeObject } from '../../src/kube/index.js';
import { eventually } from '../support/eventually.js';
import { setupEnv, templateManifest, type Env } from './claim-support.js';

type NP = KubeObject & { spec: { podSelector: unknown; egress?: unknown[]; ingress?: unknown[] } };
const getNp = async (env: Env, name: string) => {
  try {
    return await env.client.get<NP>(NetworkPolicies, env.ns, name);
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
};

describe('SandboxTemplate NetworkPolicy (spec §7, §16 bonus)', () => {
  let env: Env;
  before(async () => {
    env = await setupEnv('template');
  });
  after(() => env?.stop());

  it('Managed: one controlled NP with the secure default, then the user rules; Unmanaged deletes it', async () => {
    const t = await env.client.create(SandboxTemplates, templateManifest(env.ns, 'tpl'));
    const np = await eventually(() => getNp(env, 'tpl-network-policy'), { until: (n) => !!n, what: 'NP' });
    assert.equal(np!.metadata.ownerReferences?.[0]?.uid, t.metadata.uid);
    assert.deepEqual(np!.spec.podSelector, { matchLabels: { [LabelKeys.sandboxTemplateRefHash]: fnv1a32('tpl') } });
    assert.equal(np!.spec.egress?.length, 1);
    const labelled = await env.client.get<KubeObject>(SandboxTemplates, env.ns, 'tpl');
    assert.equal(labelled.metadata.labels?.[LabelKeys.sandboxTemplateRefHash], fnv1a32('tpl'));
    await env.client.patch(SandboxTemplates, env.ns, 'tpl', { spec: { networkPolicy: { egress: [] } } }, 'merge');
    await eventually(() => getNp(env, 'tpl-network-policy'), {
      until: (n) => (n?.spec.egress ?? []).length === 0 && (n?.spec.ingress ?? []).length === 0,
      what: 'user rules',
    });
    await env.client.patch(
      SandboxTemplates,
      env.ns,
      'tpl',
      { spec: { networkPolicyManagement: 'Unmanaged' } },
      'merge',
    );
    await eventually(() => getNp(env, 'tpl-network-policy'), { until: (n) => !n, what: 'NP deleted' });
  });

  it('a foreign NetworkPolicy with that name is never touched', async () => {
    const foreign = await env.client.create<NP>(NetworkPolicies, {
      apiVersion: 'networking.k8s.io/v1',
      kind: 'NetworkPolicy',
      metadata: { name: 'other-network-policy', namespace: env.ns },
      spec: { podSelector: {} },
    });
    await env.client.create(SandboxTemplates, templateManifest(env.ns, 'other'));
    await new Promise((r) => setTimeout(r, 1000));
    const np = await getNp(env, 'other-network-policy');
    assert.equal(np?.metadata.resourceVersion, foreign.metadata.resourceVersion);
  });
});
