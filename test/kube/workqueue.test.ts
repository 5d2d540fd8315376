import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { WorkQueue } from '../../src/kube/workqueue.js';

/**
 * `p`, or a failure after `ms`. The queue's delay timers are unref'd (a queue must not keep a process alive), so
 * a test whose only pending work is such a timer needs a timer of its own: without one the event loop drains and
 * node's runner cancels the test ("Promise resolution is still pending but the event loop has already resolved").
 */
async function within<T>(ms: number, p: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`not settled within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([p, deadline]);
  } finally {
    clearTimeout(timer);
  }
}

describe('WorkQueue (client-go semantics)', () => {
  it('de-duplicates a key that is queued twice', async () => {
    const q = new WorkQueue({ name: 't' });
    q.add('a');
    q.add('a');
    q.add('b');
    assert.equal(q.length, 2);
    assert.equal(await q.get(), 'a');
    assert.equal(await q.get(), 'b');
  });

  it('never hands one key to two workers; a re-add during processing comes back after done()', async () => {
    const q = new WorkQueue({ name: 't' });
    q.add('a');
    const k = await q.get();
    q.add('a'); // while processing
    assert.equal(q.length, 0, 'not queued while in flight');
    q.done(k!);
    assert.equal(q.length, 1);
    assert.equal(await q.get(), 'a');
  });

  it('wakes a waiting worker on add and releases waiters on shutdown', async () => {
    const q = new WorkQueue({ name: 't' });
    const waiting = q.get();
    q.add('x');
    assert.equal(await waiting, 'x');
    const idle = q.get();
    q.shutdown();
    assert.equal(await idle, undefined);
  });

  it('addAfter keeps the earliest deadline and rate limiting backs off exponentially until forget()', async () => {
    const q = new WorkQueue({ name: 't', baseDelayMs: 5 });
    q.addAfter('a', 10_000);
    q.addAfter('a', 50);
    assert.equal(await within(1000, q.get()), 'a');
    q.done('a');
    q.addRateLimited('a');
    q.addRateLimited('a');
    assert.equal(q.retries('a'), 2);
    q.forget('a');
    assert.equal(q.retries('a'), 0);
    q.shutdown();
  });
});
