/**
 * The cold create's read-back (agent-sandbox 1.0; docs/claim-model.md "Cold create"): when creating the claim's
 * Sandbox answers AlreadyExists although the caches knew none (an earlier create whose response was lost, a cache
 * that lags), one GET decides: the claim's own Sandbox is taken as its Sandbox on that pass, someone else's is the
 * "not controlled by claim" refusal, and neither waits on the cache (no SandboxCreatePending loop).
 *
 * The race itself (a create committed that the caches have not seen) cannot be arranged on demand with an operator
 * running, so the cold create is called directly, against the real apiserver, with no controller in the namespace:
 * the Sandbox named like the claim is made by the test just before, exactly as a lost earlier create would have left
 * it.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Registry } from 'prom-client';
import { controllerRef, Sandboxes, SandboxClaims, SandboxTemplates } from '../../src/kube/index.js';
import { createCold } from '../../src/operator/extensions/claim-cold-create.js';
import type { ClaimContext } from '../../src/operator/extensions/claim-context.js';
import { extensionMetrics } from '../../src/operator/extensions/metrics.js';
import type { ClaimObj, SandboxObj, TemplateObj } from '../../src/operator/extensions/support.js';
import { createTestNamespace } from '../support/cluster.js';
import { claimManifest, templateManifest, testClient } from './claim-support.js';

describe('SandboxClaim cold create: AlreadyExists is read back', () => {
  let ns: Awaited<ReturnType<typeof createTestNamespace>>;
  before(async () => {
    ns = await createTestNamespace('cold-readback');
  });
  after(() => ns?.cleanup());

  /** What createCold uses of a claim pass: the real client and metrics; the bindings record what it remembers. */
  async function context(remembered: Map<string, SandboxObj>): Promise<ClaimContext> {
    const client = await testClient();
    return {
      d: { manager: { client } },
      bindings: { remember: (uid: string, sb: SandboxObj) => remembered.set(uid, sb) },
      metrics: extensionMetrics(new Registry()),
    } as unknown as ClaimContext;
  }

  const sandboxNamed = (claim: ClaimObj, owned: boolean): SandboxObj => ({
    apiVersion: 'agents.x-k8s.io/v1beta1',
    kind: 'Sandbox',
    metadata: {
      name: claim.metadata.name,
      namespace: claim.metadata.namespace,
      ...(owned ? { ownerReferences: [controllerRef(claim, SandboxClaims)] } : {}),
    },
    spec: { podTemplate: { spec: { containers: [{ name: 'main', image: 'registry.k8s.io/pause:3.10' }] } } },
  });

  it("adopts the claim's own Sandbox on the same pass; refuses someone else's", async () => {
    const c = await testClient();
    const tpl = await c.create<TemplateObj>(SandboxTemplates, templateManifest(ns.name, 'tpl'));
    const remembered = new Map<string, SandboxObj>();
    const ctx = await context(remembered);

    const mine = await c.create<ClaimObj>(SandboxClaims, claimManifest(ns.name, 'mine', 'pool'));
    const existing = await c.create<SandboxObj>(Sandboxes, sandboxNamed(mine, true));
    const got = await createCold(ctx, mine, tpl);
    assert.equal(got.metadata.uid, existing.metadata.uid, 'the Sandbox already there is the claim’s');
    assert.equal(remembered.get(mine.metadata.uid!)?.metadata.uid, existing.metadata.uid, 'and bound to it');

    const theirs = await c.create<ClaimObj>(SandboxClaims, claimManifest(ns.name, 'theirs', 'pool'));
    await c.create<SandboxObj>(Sandboxes, sandboxNamed(theirs, false));
    await assert.rejects(createCold(ctx, theirs, tpl), (err: Error & { reason?: string; suppressed?: boolean }) => {
      assert.equal(err.reason, 'ReconcilerError');
      assert.equal(err.suppressed, true, 'a refusal only an edit fixes: not retried with backoff');
      assert.match(err.message, /sandbox "theirs" is not controlled by claim "theirs"/);
      return true;
    });
    assert.equal(remembered.has(theirs.metadata.uid!), false);
  });
});
