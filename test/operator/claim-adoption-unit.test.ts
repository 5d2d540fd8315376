/**
 * Unit tests (no cluster) of the adoption loop's bookkeeping (docs/extensions.md "Claim: the L1 fast path", steps
 * 3–4): what happens to a taken candidate when its adoption cannot be built or is refused. The context is faked:
 * a Sandbox cache of fixed views and a client whose patch answers as the test says.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { fnv1a32, LabelKeys } from '../../src/api/index.js';
import { StatusError } from '../../src/kube/index.js';
import { CandidateQueues } from '../../src/operator/extensions/candidates.js';
import { adoptWarm, offerCandidate } from '../../src/operator/extensions/claim-adoption.js';
import { ClaimBindings } from '../../src/operator/extensions/claim-binding.js';
import type { ClaimContext, ClaimDeps } from '../../src/operator/extensions/claim-context.js';
import type { ClaimObj, PoolObj, SandboxObj } from '../../src/operator/extensions/support.js';

const TEAM = 'sandbox.users.io/team';
const pool: PoolObj = {
  metadata: { name: 'p', namespace: 'ns', uid: 'pool-uid' },
  spec: { sandboxTemplateRef: { name: 'tpl' } },
};

function member(name: string, resourceVersion: string): SandboxObj {
  return {
    metadata: {
      name,
      namespace: 'ns',
      uid: `${name}-uid`,
      resourceVersion,
      labels: { [LabelKeys.warmPoolSandbox]: fnv1a32('p'), [LabelKeys.sandboxTemplateRefHash]: fnv1a32('tpl') },
      ownerReferences: [
        {
          apiVersion: 'extensions.agents.x-k8s.io/v1beta1',
          kind: 'SandboxWarmPool',
          name: 'p',
          uid: 'pool-uid',
          controller: true,
        },
      ],
    },
    spec: { podTemplate: { metadata: { labels: { [TEAM]: 'a' } }, spec: { containers: [] } } },
  } as SandboxObj;
}

function claim(labels?: Record<string, string>): ClaimObj {
  return {
    metadata: { name: 'c', namespace: 'ns', uid: 'claim-uid' },
    spec: { warmPoolRef: { name: 'p' }, ...(labels ? { additionalPodMetadata: { labels } } : {}) },
  };
}

function fakeContext(cache: Map<string, SandboxObj>, patch: (name: string, body: unknown) => Promise<SandboxObj>) {
  const ctx = {
    d: {
      manager: { client: { patch: (_rt: unknown, _ns: string, name: string, body: unknown) => patch(name, body) } },
      sandboxes: { getByName: (_ns: string, name: string) => cache.get(name) },
    },
    candidates: new CandidateQueues(),
    bindings: { remember: () => {}, uncertainAdoption: () => {} },
    metrics: { claimCreation: { inc: () => {} } },
  } as unknown as ClaimContext;
  for (const sb of cache.values()) offerCandidate(ctx, sb);
  return ctx;
}

const conflict = () =>
  new StatusError(
    409,
    { kind: 'Status', reason: 'Conflict', code: 409, message: 'the object has been modified' },
    'patch',
    '/x',
  );

describe('warm adoption bookkeeping', () => {
  it('a patch that cannot be built (pod metadata conflict, no template known) puts its candidate back', async () => {
    const cache = new Map([['m1', member('m1', '10')]]);
    const patched: string[] = [];
    const ctx = fakeContext(cache, (name) => {
      patched.push(name);
      return Promise.resolve(cache.get(name)!);
    });
    await assert.rejects(adoptWarm(ctx, claim({ [TEAM]: 'b' }), pool, undefined), /metadata override conflict/);
    assert.deepEqual(patched, []);
    assert.equal(ctx.candidates.size('ns', 'p'), 1, 'the candidate is offered again, not stranded in flight');
    // And a valid claim can take it.
    assert.equal((await adoptWarm(ctx, claim(), pool, undefined))?.metadata.name, 'm1');
    assert.deepEqual(patched, ['m1']);
  });

  it('a 409 does not retry the same stale view: one attempt, then the next candidate', async () => {
    const cache = new Map([['m1', member('m1', '10')]]);
    const tried: string[] = [];
    const ctx = fakeContext(cache, (name) => {
      tried.push(name);
      return Promise.reject(conflict());
    });
    assert.equal(await adoptWarm(ctx, claim(), pool, undefined), undefined);
    assert.deepEqual(tried, ['m1'], 'the cache still has the view that got 409: not offered again');
    // The informer's newer view offers it again.
    cache.set('m1', member('m1', '11'));
    offerCandidate(ctx, cache.get('m1')!);
    assert.equal(ctx.candidates.size('ns', 'p'), 1);
  });

  it('a 409 re-offers the candidate when the cache already holds a newer view', async () => {
    const cache = new Map([['m1', member('m1', '10')]]);
    const sent: string[] = [];
    const ctx = fakeContext(cache, (name, body) => {
      const rv = (body as { metadata: { resourceVersion: string } }).metadata.resourceVersion;
      sent.push(rv);
      if (rv === '10') {
        cache.set(name, member(name, '11')); // the event arrived while the attempt was in flight
        return Promise.reject(conflict());
      }
      return Promise.resolve(cache.get(name)!);
    });
    assert.equal((await adoptWarm(ctx, claim(), pool, undefined))?.metadata.name, 'm1');
    assert.deepEqual(sent, ['10', '11']);
  });
});

describe('a bound Sandbox deleted (ClaimBindings)', () => {
  function bindingsWith(getClaim: () => Promise<ClaimObj>) {
    const gets: string[] = [];
    const deps = {
      sandboxes: { addIndex: () => {}, getByName: () => undefined },
      manager: {
        client: {
          get: (_rt: unknown, _ns: string, name: string) => {
            gets.push(name);
            return getClaim();
          },
        },
      },
    } as unknown as ClaimDeps;
    return { bindings: new ClaimBindings(deps), gets };
  }
  const adopted = (): SandboxObj => {
    const sb = member('m1', '7');
    sb.metadata.ownerReferences = [
      {
        apiVersion: 'extensions.agents.x-k8s.io/v1beta1',
        kind: 'SandboxClaim',
        name: 'c',
        uid: 'claim-uid',
        controller: true,
      },
    ];
    return sb;
  };

  it('stops the pass when the claim is gone (its delete event is still on the way), with one GET', async () => {
    const { bindings, gets } = bindingsWith(() =>
      Promise.reject(
        new StatusError(404, { kind: 'Status', reason: 'NotFound', code: 404, message: 'gone' }, 'get', '/c'),
      ),
    );
    assert.equal(await bindings.confirmClaim(claim()), true, 'nothing deleted: no GET');
    bindings.remember('claim-uid', adopted());
    bindings.sandboxDeleted(adopted());
    assert.equal(await bindings.confirmClaim(claim()), false, 'the claim was deleted: it must not take another member');
    assert.deepEqual(gets, ['c']);
  });

  it('lets a claim that still exists be bound anew, and asks only once', async () => {
    const { bindings, gets } = bindingsWith(() => Promise.resolve(claim()));
    bindings.remember('claim-uid', adopted());
    bindings.sandboxDeleted(adopted());
    assert.equal(await bindings.confirmClaim(claim()), true);
    assert.equal(await bindings.confirmClaim(claim()), true);
    assert.deepEqual(gets, ['c']);
  });

  it('keeps a binding whose Sandbox was replaced under the same name (another UID was deleted)', async () => {
    const { bindings, gets } = bindingsWith(() => Promise.resolve(claim()));
    bindings.remember('claim-uid', adopted());
    bindings.sandboxDeleted({ ...adopted(), metadata: { ...adopted().metadata, uid: 'older-uid' } });
    assert.equal(await bindings.confirmClaim(claim()), true);
    assert.deepEqual(gets, [], 'not unbound: no GET');
  });
});
