/**
 * The lifecycle verbs' Events (docs/aggregated-layout.md "Events"), as a user finds them: `kubectl get events
 * --field-selector involvedObject.name=<sandbox>` after pausing, resuming, snapshotting and forking a sandbox on
 * real microVMs through kube-apiserver, and after a claim through a node's claim gateway. One Event per verb,
 * regarding the Sandbox (its apiVersion, kind and uid), naming who asked; a verb the node refuses is a Warning.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import {
  aggregatedNamespace,
  createSandbox,
  getAggregated,
  sandboxManifest,
  type AggregatedEnv,
} from '../support/aggregated.js';
import { claimGatewayFixture, gatewayClaim } from '../support/claim-gateway.js';

const GROUP = 'agents.x-k8s.io';
const BASE = `/apis/${GROUP}/v1beta1`;

interface CoreEvent {
  type: string;
  reason: string;
  message: string;
  reportingComponent?: string;
  involvedObject: { apiVersion: string; kind: string; name: string; namespace: string; uid?: string };
}

describe('aggregated sandboxes: lifecycle verbs record Events', () => {
  let env: AggregatedEnv;
  let ns: { name: string; cleanup(): Promise<void> };
  before(async () => {
    env = await getAggregated();
    ns = await aggregatedNamespace('verb-ev');
  });
  after(async () => ns?.cleanup());

  const raw = async (name: string, sub: string, kind: string, fields: Record<string, unknown> = {}, as?: string) =>
    JSON.parse(
      await env.kubectl(
        [
          'create',
          '--raw',
          `${BASE}/namespaces/${ns.name}/sandboxes/${name}/${sub}`,
          ...(as ? [`--as=${as}`] : []),
          '-f',
          '-',
        ],
        JSON.stringify({ apiVersion: `${GROUP}/v1beta1`, kind, ...fields }),
      ),
    );
  /** What a user lists: the core/v1 view of the Events about one object. */
  const eventsOf = async (name: string): Promise<CoreEvent[]> =>
    (
      JSON.parse(
        await env.kubectl([
          'get',
          'events',
          '-n',
          ns.name,
          '--field-selector',
          `involvedObject.name=${name}`,
          '-o',
          'json',
        ]),
      ) as { items: CoreEvent[] }
    ).items;
  /** Events are recorded off the verb's path: wait (bounded) until `n` are listed. */
  const waitForEvents = async (name: string, n: number): Promise<CoreEvent[]> => {
    const deadline = Date.now() + 15_000;
    for (;;) {
      const items = await eventsOf(name);
      if (items.length >= n || Date.now() > deadline) return items;
      await new Promise((r) => setTimeout(r, 200));
    }
  };

  it('pause, a refused fork, resume, snapshot and fork: one Event each, on the Sandbox, naming who asked', async () => {
    await createSandbox(env, ns.name, sandboxManifest('ev'));
    const sb = JSON.parse(await env.kubectl(['get', '-n', ns.name, 'sandbox', 'ev', '-o', 'json'])) as {
      metadata: { uid: string };
    };
    const admin = (
      JSON.parse(await env.kubectl(['auth', 'whoami', '-o', 'json'])) as { status: { userInfo: { username: string } } }
    ).status.userInfo.username;
    // The pause is asked by another user (impersonated, allowed to pause only): the Event names that user.
    await env.kubectl([
      'create',
      'role',
      'pauser',
      '-n',
      ns.name,
      '--verb=create',
      `--resource=sandboxes.${GROUP}/pause`,
    ]);
    await env.kubectl(['create', 'rolebinding', 'pauser', '-n', ns.name, '--role=pauser', '--user=ev-pauser']);

    const paused = (await raw('ev', 'pause', 'SandboxPauseOptions', {}, 'ev-pauser')) as { mode: string };
    // A paused sandbox cannot fork: the node refuses (409), and that is a Warning with the failure.
    await assert.rejects(raw('ev', 'fork', 'SandboxForkOptions', { count: 1 }), /resume it first/);
    await raw('ev', 'resume', 'SandboxResumeOptions');
    const snap = (await raw('ev', 'snapshot', 'SandboxSnapshotOptions', { name: 'ev-snap' })) as {
      snapshotID: string;
    };
    const forked = (await raw('ev', 'fork', 'SandboxForkOptions', { count: 1 })) as {
      children: Array<{ name: string }>;
    };
    // exec is not a change of state: it records nothing (as `kubectl exec` records nothing).
    await raw('ev', 'exec', 'SandboxExecOptions', { command: ['true'] });

    const events = await waitForEvents('ev', 5);
    const byReason = new Map<string, CoreEvent[]>();
    for (const e of events) byReason.set(e.reason, [...(byReason.get(e.reason) ?? []), e]);
    const pauseReason = paused.mode === 'Hibernate' ? 'SandboxHibernated' : 'SandboxPaused';
    assert.deepEqual(
      [...byReason.keys()].sort(),
      [pauseReason, 'SandboxForkFailed', 'SandboxForked', 'SandboxResumed', 'SandboxSnapshotTaken'].sort(),
      JSON.stringify(events.map((e) => [e.reason, e.message])),
    );
    for (const [reason, list] of byReason) assert.equal(list.length, 1, `one ${reason} Event`);
    for (const e of events) {
      assert.deepEqual(
        {
          apiVersion: e.involvedObject.apiVersion,
          kind: e.involvedObject.kind,
          name: e.involvedObject.name,
          namespace: e.involvedObject.namespace,
          uid: e.involvedObject.uid,
        },
        { apiVersion: `${GROUP}/v1beta1`, kind: 'Sandbox', name: 'ev', namespace: ns.name, uid: sb.metadata.uid },
        e.reason,
      );
      assert.equal(e.reportingComponent, 'sandbox-apiserver');
      assert.equal(e.type, e.reason === 'SandboxForkFailed' ? 'Warning' : 'Normal', e.reason);
    }
    const note = (reason: string) => byReason.get(reason)![0]!.message;
    assert.match(note(pauseReason), /by ev-pauser/);
    assert.match(note('SandboxResumed'), new RegExp(`by ${admin.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`));
    assert.match(note('SandboxForkFailed'), /Conflict.*resume it first/);
    assert.ok(note('SandboxSnapshotTaken').includes(snap.snapshotID), note('SandboxSnapshotTaken'));
    assert.ok(note('SandboxForked').includes(forked.children[0]!.name), note('SandboxForked'));
  });

  it('a claim through the claim gateway records SandboxClaimed on the Sandbox, naming the token’s user', async () => {
    const token = await claimGatewayFixture(env.kubectl, ns.name);
    const node = env.sandboxd[0]!;
    const r = await gatewayClaim(node.claimAddress!, token, { namespace: ns.name, name: 'ev-gw', warm_pool: 'pool' });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    const [e] = await waitForEvents('ev-gw', 1);
    assert.ok(e, 'a SandboxClaimed Event');
    const sb = JSON.parse(await env.kubectl(['get', '-n', ns.name, 'sandbox', 'ev-gw', '-o', 'json'])) as {
      metadata: { uid: string };
    };
    assert.equal(e.reason, 'SandboxClaimed');
    assert.equal(e.type, 'Normal');
    assert.equal(e.reportingComponent, 'sandboxd');
    assert.deepEqual(
      { ...e.involvedObject, resourceVersion: undefined, fieldPath: undefined },
      {
        apiVersion: `${GROUP}/v1beta1`,
        kind: 'Sandbox',
        name: 'ev-gw',
        namespace: ns.name,
        uid: sb.metadata.uid,
        resourceVersion: undefined,
        fieldPath: undefined,
      },
    );
    assert.match(e.message, new RegExp(`Claimed by system:serviceaccount:${ns.name}:claimer .*${String(r.json.id)}`));
    assert.equal((await eventsOf('ev-gw')).length, 1, 'one Event');
  });

  it('a verb on a sandbox that is not served records nothing (there is no Sandbox to regard)', async () => {
    await assert.rejects(raw('ev-missing', 'pause', 'SandboxPauseOptions'), /NotFound|not found/);
    await new Promise((r) => setTimeout(r, 1000));
    assert.deepEqual(await eventsOf('ev-missing'), []);
  });
});
