import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { AnnotationKeys } from '../../src/api/index.js';
import { controllerOf, Pods, SandboxClaims, Sandboxes, type KubeObject } from '../../src/kube/index.js';
import type { ClaimObj, SandboxObj } from '../../src/operator/extensions/support.js';
import { eventually } from '../support/eventually.js';
import {
  claimManifest,
  cond,
  createAll,
  poolManifest,
  setupEnv,
  templateManifest,
  waitClaim,
  waitPoolReady,
  type Env,
} from './claim-support.js';

describe('SandboxClaim watchers (§14.2 TestWarmPoolSandboxWatcher, PodNameAnnotationBeforeReady, ObservabilityAnnotation)', () => {
  let env: Env;
  before(async () => {
    env = await setupEnv('claim-watch');
    await createAll(env.client, templateManifest(env.ns, 'tpl'), poolManifest(env.ns, 'pool', 'tpl', 2));
    await waitPoolReady(env.ns, 'pool', 2);
  });
  after(() => env?.stop());

  it('no watch event shows a claim-owned Sandbox Ready without pod-name; deleting the pod flips the claim', async (t) => {
    const events: SandboxObj[] = [];
    const stop = new AbortController();
    // A failed assertion must not leave the watches open: they would keep the test file from ever ending.
    t.after(() => stop.abort());
    const watching = env.client
      .watch<SandboxObj>(
        Sandboxes,
        env.ns,
        { resourceVersion: '0' },
        (ev) => void (ev.type !== 'BOOKMARK' && events.push(ev.object)),
        stop.signal,
      )
      .catch(() => {});
    const testStart = Date.now();
    // Every event of the claim from before its create: what a watcher sees at the moment it turns Ready.
    const claims = await env.client.list<ClaimObj>(SandboxClaims, env.ns);
    const claimEvents: ClaimObj[] = [];
    const claimWatch = env.client
      .watch<ClaimObj>(
        SandboxClaims,
        env.ns,
        { resourceVersion: claims.metadata.resourceVersion },
        (ev) => void (ev.type !== 'BOOKMARK' && ev.object.metadata.name === 'w1' && claimEvents.push(ev.object)),
        stop.signal,
      )
      .catch(() => {});
    await env.client.create(SandboxClaims, claimManifest(env.ns, 'w1', 'pool'));
    await waitClaim(env.ns, 'w1');
    const annotated = await eventually(async () => claimEvents.find((c) => cond(c)?.status === 'True'), {
      until: (c) => c !== undefined,
      what: 'the watch event where the claim turns Ready',
    });
    const sbName = annotated!.status!.sandbox!.name!;

    // At that very event (spec §9.1; upstream's TestSandboxClaimObservability): the claim names its Sandbox, and the
    // observability annotation is RFC3339Nano, with a non-zero sub-second part, not before the test started.
    const a = annotated!.metadata.annotations ?? {};
    assert.equal(a[AnnotationKeys.sandboxName], sbName, `the Ready event (rv ${annotated!.metadata.resourceVersion})`);
    const first = a[AnnotationKeys.controllerFirstObservedAt];
    assert.ok(first, `the Ready event (rv ${annotated!.metadata.resourceVersion}) lacks controller-first-observed-at`);
    assert.match(first, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d*[1-9]Z$/);
    assert.ok(Date.parse(first) >= testStart - 1000);

    const pod = await env.client.get<KubeObject>(Pods, env.ns, sbName);
    assert.equal(controllerOf(pod)?.kind, 'Sandbox');
    // Deleting the pod flips the Sandbox and the claim off Ready (the pod is recreated quickly, so watch, not poll).
    const claimEventsBefore = claimEvents.length;
    const sbEventsBefore = events.length;
    await env.client.delete(Pods, env.ns, sbName, { gracePeriodSeconds: 0 });
    await eventually(() => claimEvents.slice(claimEventsBefore).filter((c) => cond(c)?.status !== 'True').length, {
      until: (n) => n > 0,
      what: 'a claim event with Ready not True after the pod deletion',
    });
    assert.ok(
      events.slice(sbEventsBefore).some((s) => s.metadata.name === sbName && cond(s)?.status !== 'True'),
      'Sandbox observed not Ready',
    );
    stop.abort();
    await Promise.all([watching, claimWatch]);
    const claimOwnedReady = events.filter(
      (s) => controllerOf(s)?.kind === 'SandboxClaim' && cond(s)?.status === 'True',
    );
    assert.ok(claimOwnedReady.length > 0);
    for (const s of claimOwnedReady)
      assert.ok(
        s.metadata.annotations?.[AnnotationKeys.podName],
        `event rv ${s.metadata.resourceVersion} lacks pod-name`,
      );
  });
});
