/**
 * What only servers write on a Sandbox (src/api/keys.ts ServerWrittenSandboxKeys, the one list) cannot be written by
 * a create, and a fork does not copy it from its parent: the claim gateway's delivery marks (which once made
 * sandboxd, with cluster-wide rights, create or bind SandboxClaims for whoever could create a Sandbox), the claim
 * binder's claim UID, a fork's parent, the materialized claim id/address/deadline/token and node/phase labels. And a
 * lease-end hibernate on a networked VM is accepted like any other (issue 30: every verb on the egress lane), on the
 * aggregated create and on the e2b API's create (autoPause with internet access).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
// a namespace import, so this file also loads against code from before the list (and fails there on its assertions)
import * as api from '../../src/api/index.js';
import { SandboxOps } from '../../src/apiserver/e2b/sandbox-ops.js';
import type { TemplateAlias } from '../../src/apiserver/e2b/templates.js';
import { SandboxActions } from '../../src/apiserver/sandboxes/actions.js';
import type { CreateRequest } from '../../src/apiserver/sandboxes/create.js';
import type { NodeRow } from '../../src/apiserver/sandboxes/entry.js';
import { EventLog } from '../../src/apiserver/sandboxes/event-log.js';
import type { Fleet } from '../../src/apiserver/sandboxes/fleet.js';
import type { SandboxdClient } from '../../src/apiserver/sandboxes/sandboxd-client.js';
import type { SandboxStorage } from '../../src/apiserver/sandboxes/storage.js';
import { SandboxStore } from '../../src/apiserver/sandboxes/store.js';
import { createRequest, validationCreator } from './create-fixture.js';
import { StatusFailure } from '../../src/apiserver/status.js';
import { silentLogger } from '../../src/log/logger.js';

/** Spelled out here, not read from the list under test: each must be refused. */
const SERVER_ANNOTATIONS = [
  'sandbox.cocoonstack.io/claim-id',
  'sandbox.cocoonstack.io/address',
  'sandbox.cocoonstack.io/token',
  'sandbox.cocoonstack.io/deadline',
  'sandbox.cocoonstack.io/delivered-by',
  'sandbox.cocoonstack.io/warm-pool',
  'sandbox.cocoonstack.io/claimed-by',
  'agents.x-k8s.io/sandbox-template-ref',
];
const SERVER_LABELS = [
  'sandbox.cocoonstack.io/node',
  'sandbox.cocoonstack.io/phase',
  'sandbox.cocoonstack.io/forked-from',
  'agents.x-k8s.io/claim-uid',
];

const creator = validationCreator();
const refusal = (metadata: Record<string, unknown>) => {
  try {
    creator.validate(createRequest(metadata));
  } catch (err) {
    assert.ok(err instanceof StatusFailure, String(err));
    return err.status;
  }
  assert.fail(`accepted ${JSON.stringify(metadata)}`);
};

describe('server-written keys on a Sandbox', () => {
  it('a create that sets one is refused with a 422 naming it', () => {
    for (const [kind, keys] of [
      ['annotations', SERVER_ANNOTATIONS],
      ['labels', SERVER_LABELS],
    ] as const)
      for (const key of keys) {
        const s = refusal({ name: 'a', [kind]: { [key]: 'x' } });
        assert.equal(s.code, 422, key);
        assert.deepEqual(
          s.details?.causes?.map((c) => [c.reason, c.field]),
          [['FieldValueForbidden', `metadata.${kind}[${key}]`]],
          key,
        );
      }
    // the gateway's marks together, as a forged delivery would carry them: each named
    const s = refusal({
      name: 'forged',
      annotations: {
        'sandbox.cocoonstack.io/delivered-by': 'claim-gateway',
        'sandbox.cocoonstack.io/warm-pool': 'pool',
        'sandbox.cocoonstack.io/claimed-by': 'system:serviceaccount:ns:admin',
      },
    });
    assert.equal(s.details?.causes?.length, 3);
  });

  it('the claim binder writes its own keys, and only those', () => {
    const binder = {
      name: 'claim-1',
      labels: { 'agents.x-k8s.io/claim-uid': 'u-1' },
      annotations: { 'agents.x-k8s.io/sandbox-template-ref': 'tpl', 'sandbox.cocoonstack.io/warm-pool': 'pool' },
    };
    assert.equal(creator.validate(createRequest(binder, { serverKeys: api.ClaimBinderSandboxKeys })).name, 'claim-1');
    assert.throws(
      () =>
        creator.validate(
          createRequest(
            {
              ...binder,
              annotations: { ...binder.annotations, 'sandbox.cocoonstack.io/delivered-by': 'claim-gateway' },
            },
            { serverKeys: api.ClaimBinderSandboxKeys },
          ),
        ),
      (err: unknown) =>
        err instanceof StatusFailure &&
        err.status.details?.causes?.[0]?.field === 'metadata.annotations[sandbox.cocoonstack.io/delivered-by]',
    );
  });

  it("a fork's children carry the parent's own keys, not what servers wrote on it", async () => {
    const store = new SandboxStore(silentLogger, new EventLog(8));
    const row = (id: string, namespace: string, name: string, object: NodeRow['object']): NodeRow => ({
      id,
      key: { template: 'sandbox/minimal', net: 'none', size: 'small' },
      deadline: new Date(Date.now() + 600_000).toISOString(),
      claimed_at: new Date().toISOString(),
      hibernated: false,
      rv: 1,
      claim_ref: `${namespace}/${name}`,
      object: object ?? {
        metadata: { name, namespace, uid: `uid-${name}`, creationTimestamp: '2026-12-01T10:00:00Z' },
        spec: { podTemplate: { spec: { containers: [{ name: 'c', image: 'sandbox/minimal' }] } } },
      },
    });
    store.upsert(
      'node-0',
      '127.0.0.1:7777',
      row('sb_parent', 'ns', 'parent', {
        metadata: {
          name: 'parent',
          namespace: 'ns',
          uid: 'uid-parent',
          creationTimestamp: '2026-12-01T10:00:00Z',
          labels: { team: 'blue', 'agents.x-k8s.io/claim-uid': 'u-1', 'sandbox.cocoonstack.io/forked-from': 'gp' },
          annotations: {
            note: 'kept',
            'sandbox.cocoonstack.io/delivered-by': 'claim-gateway',
            'sandbox.cocoonstack.io/warm-pool': 'pool',
            'sandbox.cocoonstack.io/claimed-by': 'alice',
            'agents.x-k8s.io/sandbox-template-ref': 'tpl',
          },
        },
        spec: { podTemplate: { spec: { containers: [{ name: 'c', image: 'sandbox/minimal' }] } } },
      }),
    );
    const sent: Array<{ claim_ref: string; object: NonNullable<NodeRow['object']> }> = [];
    const client = {
      call: async (_n: string, _a: string, _m: string, _p: string, body: { objects: typeof sent }) => {
        sent.push(...body.objects);
        return {
          children: body.objects.map((o, i) => ({
            id: `sb_child${i}`,
            token: 't',
            deadline: new Date().toISOString(),
            owner_addr: '127.0.0.1:7777',
            sandbox: { ...row(`sb_child${i}`, 'ns', o.object.metadata.name, o.object), rv: 2 },
          })),
        };
      },
    } as unknown as SandboxdClient;
    await new SandboxActions(store, client).act('ns', 'parent', 'fork', { count: 1 });
    assert.equal(sent.length, 1);
    const m = sent[0]!.object.metadata;
    assert.deepEqual(m.labels, { team: 'blue', 'sandbox.cocoonstack.io/forked-from': 'parent' });
    assert.deepEqual(m.annotations, { note: 'kept' });
  });
});

describe('a lease-end hibernate on a networked VM', () => {
  it('the aggregated create accepts the on-expiry annotation on the egress lane', () => {
    const { key, policy } = creator.validate(
      createRequest({
        name: 'a',
        annotations: { [api.CocoonAnnotationKeys.onExpiry]: 'hibernate', [api.CocoonAnnotationKeys.net]: 'egress' },
      }),
    );
    assert.equal(key.net, 'egress');
    assert.equal(policy.on_expiry, 'hibernate');
  });

  it('the e2b create takes autoPause with internet access to the create', async () => {
    const created: unknown[] = [];
    const templates = new Map<string, TemplateAlias>([
      ['base', { id: 'base', template: 'sandbox/minimal', size: 'small', net: 'none' }],
      ['online', { id: 'online', template: 'sandbox/minimal', size: 'small', net: 'egress' }],
    ]);
    const ops = new SandboxOps({
      storage: {
        create: async (req: CreateRequest) => {
          created.push(req.body);
          throw new Error('stop here: the create was reached');
        },
      } as unknown as SandboxStorage,
      fleet: {} as Fleet,
      store: new SandboxStore(silentLogger, new EventLog(8)),
      client: {} as SandboxdClient,
      templates,
      namespace: 'e2b',
      log: silentLogger,
    });
    for (const body of [
      { templateID: 'online', autoPause: true },
      { templateID: 'online', autoPause: true, allow_internet_access: true },
    ])
      await assert.rejects(ops.create(body), /stop here: the create was reached/, JSON.stringify(body));
    const asked = (created as Array<{ metadata: { annotations: Record<string, string> } }>).map((b) => [
      b.metadata.annotations[api.CocoonAnnotationKeys.net],
      b.metadata.annotations[api.CocoonAnnotationKeys.onExpiry],
    ]);
    assert.deepEqual(asked, [
      ['egress', 'hibernate'],
      ['egress', 'hibernate'],
    ]);
  });
});
