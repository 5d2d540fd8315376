/**
 * ExpiringCache, the review caches' store: bounded LRU with TTLs and shared loads, and the claim gateway's two
 * options — refresh-ahead (a value in use is reloaded before it expires, without a caller waiting) and stale
 * serving (an expired value keeps answering while its reload cannot get through, and only then).
 */
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, it } from 'node:test';
import { ExpiringCache } from '../../src/kube/expiring-cache.js';

/** A load whose answers the test controls: each call waits for resolve/reject of its own. */
function controlledLoad() {
  const calls: Array<{ resolve(v: string): void; reject(e: Error): void }> = [];
  const load = () =>
    new Promise<string>((resolve, reject) => {
      calls.push({ resolve, reject });
    });
  return { calls, load };
}

const ttl = (ms: number) => () => ms;
const settle = () => sleep(0);

describe('ExpiringCache', () => {
  it('shares one load among concurrent misses, caches the value, never caches a failure', async () => {
    const c = new ExpiringCache<string>(10);
    const { calls, load } = controlledLoad();
    const a = c.getOrLoad('k', load, ttl(1000));
    const b = c.getOrLoad('k', load, ttl(1000));
    await settle();
    assert.equal(calls.length, 1);
    calls[0]!.resolve('v1');
    assert.deepEqual(await Promise.all([a, b]), ['v1', 'v1']);
    assert.equal(await c.getOrLoad('k', load, ttl(1000)), 'v1');
    assert.equal(calls.length, 1, 'a hit loads nothing');

    const failed = c.getOrLoad('x', load, ttl(1000));
    await settle();
    calls[1]!.reject(new Error('unreachable'));
    await assert.rejects(failed, /unreachable/);
    const again = c.getOrLoad('x', load, ttl(1000));
    await settle();
    assert.equal(calls.length, 3, 'a failed load is asked again');
    calls[2]!.resolve('x1');
    assert.equal(await again, 'x1');
  });

  it('expires entries and drops the least recently used past its bound', async () => {
    const c = new ExpiringCache<string>(2);
    c.set('a', '1', 30);
    c.set('b', '2', 1000);
    assert.equal(c.get('a'), '1'); // a is now the most recently used
    c.set('c', '3', 1000);
    assert.equal(c.get('b'), undefined, 'b was the least recently used');
    assert.equal(c.size, 2);
    await sleep(40);
    assert.equal(c.get('a'), undefined, 'expired');
    assert.throws(() => new ExpiringCache(0), /positive integer/);
    assert.throws(() => new ExpiringCache(1, { refreshAhead: 1 }), /between 0 and 1/);
  });

  it('peek: a hit past refreshAhead reloads in the background and the reloaded value replaces the old one', async () => {
    const c = new ExpiringCache<string>(10, { refreshAhead: 0.5 });
    const { calls, load } = controlledLoad();
    c.set('k', 'old', 100);
    assert.equal(c.peek('k', load, ttl(100)), 'old');
    await settle();
    assert.equal(calls.length, 0, 'young: no reload');
    await sleep(60);
    assert.equal(c.peek('k', load, ttl(100)), 'old', 'past half its TTL: still answered at once');
    assert.equal(c.peek('k', load, ttl(100)), 'old');
    await settle();
    assert.equal(calls.length, 1, 'one reload, shared');
    calls[0]!.resolve('new');
    await settle();
    assert.equal(c.peek('k', load, ttl(100)), 'new');
  });

  it('peek: an expired entry is served within staleMs only while its reload is in flight or failed', async () => {
    const c = new ExpiringCache<string>(10, { refreshAhead: 0.5, staleMs: 200 });
    const { calls, load } = controlledLoad();
    c.set('k', 'v', 40);
    await sleep(50);
    assert.equal(c.peek('k', load, ttl(40)), undefined, 'expired and nobody asked again: the caller must wait');
    // the caller waits (getOrLoad); the source does not answer: peek serves the old value meanwhile
    const waiting = c.getOrLoad('k', load, ttl(40));
    await settle();
    assert.equal(calls.length, 1);
    assert.equal(c.peek('k', load, ttl(40)), 'v', 'reload in flight: stale value');
    calls[0]!.reject(new Error('apiserver unreachable'));
    assert.equal(await waiting, 'v', 'the waiting caller falls back to the value within staleMs');
    assert.equal(c.peek('k', load, ttl(40)), 'v', 'reload failed: stale value, and a new reload is started');
    await settle();
    assert.equal(calls.length, 2);
    calls[1]!.resolve('fresh');
    await settle();
    assert.equal(c.peek('k', load, ttl(40)), 'fresh', 'a reload that answers wins');

    await sleep(260);
    assert.equal(c.peek('k', load, ttl(40)), undefined, 'past staleMs nothing is served');
    const late = c.getOrLoad('k', load, ttl(40));
    await settle();
    calls[2]!.reject(new Error('still unreachable'));
    await assert.rejects(late, /still unreachable/, 'past staleMs a failed load fails');
  });

  it('without staleMs a failed reload of an expired entry fails the caller (sandbox-apiserver semantics)', async () => {
    const c = new ExpiringCache<string>(10);
    const { calls, load } = controlledLoad();
    c.set('k', 'v', 20);
    await sleep(30);
    const p = c.getOrLoad('k', load, ttl(20));
    await settle();
    calls[0]!.reject(new Error('down'));
    await assert.rejects(p, /down/);
  });
});
