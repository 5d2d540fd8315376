import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { SandboxClaims } from '../../src/kube/index.js';
import { eventually } from '../support/eventually.js';
import {
  claimManifest,
  cond,
  createAll,
  getClaim,
  getSandboxOrUndefined,
  poolManifest,
  setupEnv,
  templateManifest,
  waitClaim,
  waitPoolReady,
  type Env,
} from './claim-support.js';

const inSeconds = (s: number) => new Date(Date.now() + s * 1000).toISOString().replace(/\.\d+Z$/, 'Z');

describe('SandboxClaim lifecycle (spec §16 item 20)', () => {
  let env: Env;
  before(async () => {
    env = await setupEnv('claim-life');
    await createAll(env.client, templateManifest(env.ns, 'tpl'), poolManifest(env.ns, 'pool', 'tpl', 3));
    await waitPoolReady(env.ns, 'pool', 3);
  });
  after(() => env?.stop());

  it('Retain: ClaimExpired persisted, Sandbox deleted, claim kept; Delete and DeleteForeground remove the claim and cascade', async () => {
    const shutdownTime = inSeconds(3);
    for (const [name, policy] of [
      ['retain', 'Retain'],
      ['del', 'Delete'],
      ['fg', 'DeleteForeground'],
    ] as const)
      await env.client.create(
        SandboxClaims,
        claimManifest(env.ns, name, 'pool', { lifecycle: { shutdownTime, shutdownPolicy: policy } }),
      );
    const bound: Record<string, string> = {};
    for (const name of ['retain', 'del', 'fg']) bound[name] = (await waitClaim(env.ns, name)).status!.sandbox!.name!;
    const expired = await waitClaim(env.ns, 'retain', 'ClaimExpired', 15_000);
    assert.equal(cond(expired)?.message, 'Claim expired. Sandbox cleanup initiated.');
    assert.ok(Date.now() >= Date.parse(shutdownTime));
    await eventually(() => getSandboxOrUndefined(env.ns, bound.retain!), {
      until: (s) => !s,
      what: 'retained claim sandbox deleted',
    });
    await sleep(300);
    assert.ok(await getClaim(env.ns, 'retain'), 'Retain keeps the claim');
    for (const name of ['del', 'fg']) {
      await eventually(() => getClaim(env.ns, name), {
        until: (c) => !c,
        what: `${name} claim deleted`,
        timeoutMs: 30_000,
      });
      await eventually(() => getSandboxOrUndefined(env.ns, bound[name]!), {
        until: (s) => !s,
        what: `${name} sandbox cascaded`,
        timeoutMs: 30_000,
      });
    }
  });

  it('without shutdownTime or TTL a claim is never expired', async () => {
    await env.client.create(
      SandboxClaims,
      claimManifest(env.ns, 'forever', 'pool', { lifecycle: { shutdownPolicy: 'Delete', ttlSecondsAfterFinished: 0 } }),
    );
    await waitClaim(env.ns, 'forever');
    await sleep(1500);
    const c = await getClaim(env.ns, 'forever');
    assert.equal(cond(c)?.status, 'True');
  });
});
