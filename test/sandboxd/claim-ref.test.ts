/**
 * One live claim per claim_ref (docs/sandboxd-api.md: "a second claim of a live claim_ref is 409"), through the
 * node's HTTP API in-process over the simulated engine (src/vmm/sim-driver.ts): a clone takes `cloneMs`, so a claim
 * that has to make its VM is in flight long enough for a second claim of the same ref to arrive meanwhile. That
 * second claim gets its 409 at once, and a claim that fails gives its ref back.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { NodeEngine } from '../../src/sandboxd/engine.js';
import type { SandboxdApi } from '../../src/sandboxd/http-api.js';
import type { SimulatedMicrovmDriver } from '../../src/vmm/index.js';
import { listenSandboxdApi, simNodeEngine } from '../support/sim-node.js';

const KEY = { template: 'sandbox/minimal', net: 'none', size: 'small' } as const;
const CLONE_MS = 300;

const objectOf = (ref: string) => {
  const [namespace, name] = ref.split('/');
  return { metadata: { namespace, name } };
};

describe('claim_ref: one live claim per ref (simulated engine, in-process API)', () => {
  let dir: string;
  let driver: SimulatedMicrovmDriver;
  let engine: NodeEngine;
  let api: SandboxdApi;
  let base: string;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sbx-claimref-'));
    ({ driver, engine } = simNodeEngine(dir, { cloneMs: CLONE_MS }));
    await engine.start();
    await engine.prepare(KEY); // no warm target: every claim clones (CLONE_MS)
    ({ api, base } = await listenSandboxdApi({
      engine,
      auth: { rootToken: undefined, tenants: new Map(), allowAnonymous: true },
    }));
  });
  after(async () => {
    await api.close();
    await engine.close({ destroyVms: true });
    await rm(dir, { recursive: true, force: true });
  });

  async function post(path: string, body: unknown) {
    const t0 = performance.now();
    const r = await fetch(`${base}${path}`, { method: 'POST', body: JSON.stringify(body) });
    const json = (await r.json()) as Record<string, unknown>;
    return { status: r.status, json, ms: performance.now() - t0 };
  }
  const claim = (ref: string) => post('/v1/claim', { ...KEY, claim_ref: ref, object: objectOf(ref) });
  const live = (ref: string) => engine.list({ claimRef: ref }).length;

  /** Both orders of two concurrent requests: exactly one made a claim, the other was 409 at once. */
  function oneWins(answers: Array<{ status: number; json: Record<string, unknown>; ms: number }>) {
    assert.deepEqual(answers.map((a) => a.status).sort(), [200, 409], JSON.stringify(answers.map((a) => a.json)));
    const lost = answers.find((a) => a.status === 409)!;
    assert.match(String(lost.json.error), /is already claimed/);
    assert.ok(lost.ms < CLONE_MS, `the 409 took ${lost.ms.toFixed(0)} ms: it waited for the other's clone`);
  }

  it('two concurrent claims of one claim_ref (empty pool): one claim, one 409 at once', async () => {
    const before = driver.size;
    oneWins(await Promise.all([claim('ns/b'), claim('ns/b')]));
    assert.equal(live('ns/b'), 1);
    assert.equal(driver.size, before + 1, 'the 409 made no VM');
    assert.equal((await claim('ns/b')).status, 409, 'a live ref stays taken');
  });

  it('a claim that fails gives its claim_ref back', async () => {
    const clone = driver.clone.bind(driver);
    driver.clone = async () => {
      throw new Error('simulated clone failure');
    };
    try {
      assert.equal((await claim('ns/f')).status, 500);
    } finally {
      driver.clone = clone;
    }
    assert.equal(live('ns/f'), 0);
    assert.equal((await claim('ns/f')).status, 200, 'the ref is free again');
  });

  it('a fork naming one claim_ref for two children is 400, and makes no VM', async () => {
    // children with objects stay in the parent's namespace (lifecycle-routes.ts): the parent has one there
    const parent = await claim('ns/parent-twice');
    const before = driver.size;
    const claimed = engine.claimedCount;
    const r = await post(`/v1/sandboxes/${String(parent.json.id)}/fork`, {
      count: 2,
      objects: [
        { claim_ref: 'ns/a', object: objectOf('ns/a') },
        { claim_ref: 'ns/a', object: objectOf('ns/a') },
      ],
    });
    assert.equal(r.status, 400, JSON.stringify(r.json));
    assert.match(String(r.json.error), /objects\[1\]\.claim_ref: ns\/a is given twice/);
    assert.equal(live('ns/a'), 0);
    assert.equal(driver.size, before);
    assert.equal(engine.claimedCount, claimed);
  });

  it('a fork and a claim of one claim_ref at once: one of them, the other 409 at once', async () => {
    const parent = await claim('ns/parent-race');
    const fork = (ref: string) =>
      post(`/v1/sandboxes/${String(parent.json.id)}/fork`, {
        count: 1,
        objects: [{ claim_ref: ref, object: objectOf(ref) }],
      });
    oneWins(await Promise.all([fork('ns/c'), claim('ns/c')]));
    oneWins(await Promise.all([claim('ns/d'), fork('ns/d')]));
    assert.equal(live('ns/c'), 1);
    assert.equal(live('ns/d'), 1);
  });

  it('two concurrent claims of one claim_ref from a checkpoint: one claim, one 409 at once', async () => {
    const src = await post('/v1/claim', KEY);
    const ck = await post(`/v1/sandboxes/${String(src.json.id)}/checkpoint`, {});
    const id = (ck.json.checkpoint as { id: string }).id;
    const fromCk = (ref: string) => post(`/v1/checkpoints/${id}/claim`, { claim_ref: ref, object: objectOf(ref) });
    oneWins(await Promise.all([fromCk('ns/e'), fromCk('ns/e')]));
    assert.equal(live('ns/e'), 1);
    // The checkpoint claim also sees a claim of the ref in flight on the plain claim path.
    oneWins(await Promise.all([claim('ns/g'), fromCk('ns/g')]));
    assert.equal(live('ns/g'), 1);
  });
});
