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
  getClaim,
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

  it('no watch event shows a claim-owned Sandbox Ready without pod-name; deleting the pod flips the claim', async () => {
    const events: SandboxObj[] = [];
    const stop = new AbortController();
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
    await env.client.create(SandboxClaims, claimManifest(env.ns, 'w1', 'pool'));
    const claim = await waitClaim(env.ns, 'w1');
    const sbName = claim.status!.sandbox!.name!;

    // Observability annotation: RFC3339Nano, non-zero sub-second part, not before the test started.
    const annotated = await eventually(() => getClaim(env.ns, 'w1'), {
      until: (c) => !!c?.metadata.annotations?.[AnnotationKeys.controllerFirstObservedAt],
      what: 'annotation',
    });
    const first = annotated!.metadata.annotations![AnnotationKeys.controllerFirstObservedAt]!;
    assert.match(first, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d*[1-9]Z$/);
    assert.ok(Date.parse(first) >= testStart - 1000);

    const pod = await env.client.get<KubeObject>(Pods, env.ns, sbName);
    assert.equal(controllerOf(pod)?.kind, 'Sandbox');
    // Deleting the pod flips the Sandbox and the claim off Ready (the pod is recreated quickly, so watch, not poll).
    const claimEvents: ClaimObj[] = [];
    const claimWatch = env.client
      .watch<ClaimObj>(
        SandboxClaims,
        env.ns,
        { resourceVersion: annotated!.metadata.resourceVersion },
        (ev) => void (ev.type !== 'BOOKMARK' && claimEvents.push(ev.object)),
        stop.signal,
      )
      .catch(() => {});
    const sbEventsBefore = events.length;
    await env.client.delete(Pods, env.ns, sbName, { gracePeriodSeconds: 0 });
    await eventually(() => claimEvents.filter((c) => c.metadata.name === 'w1' && cond(c)?.status !== 'True').length, {
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
