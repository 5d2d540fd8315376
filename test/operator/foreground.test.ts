/**
 * Unit tests (no cluster) of claims-before-background: the Foreground signal, the warm pool's refill policy that
 * yields to it, and the pool's own member names.
 */
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it, mock } from 'node:test';
import { Foreground, MAX_HOLD_MS, QUIET_MS } from '../../src/operator/foreground.js';
import { memberName } from '../../src/operator/extensions/warm-member.js';
import {
  REFILL_COALESCE_MS,
  RefillPolicy,
  STATUS_MIN_INTERVAL_MS,
} from '../../src/operator/extensions/warm-pool-refill.js';

describe('Foreground', () => {
  let t = 0;
  const fg = () => new Foreground(() => t);
  beforeEach(() => (t = 1_000));

  it('holds nothing while no claim was seen', () => {
    const f = fg();
    assert.equal(f.busy, false);
    assert.equal(f.hold('a'), 0);
  });

  it('holds background work until claims have been quiet for QUIET_MS', () => {
    const f = fg();
    f.touch();
    assert.equal(f.hold('a'), QUIET_MS);
    t += QUIET_MS - 50;
    assert.equal(f.hold('a'), 50);
    t += 50;
    assert.equal(f.busy, false);
    assert.equal(f.hold('a'), 0);
  });

  it('holds while a claim pass is in flight, however long ago the claim arrived', () => {
    const f = fg();
    f.begin();
    t += QUIET_MS * 3;
    assert.equal(f.busy, true);
    assert.ok(f.hold('a') > 0);
    f.end();
    t += QUIET_MS;
    assert.equal(f.hold('a'), 0);
  });

  it('never holds one key longer than MAX_HOLD_MS in a row, even under sustained claims', () => {
    const f = fg();
    let held = 0;
    for (;;) {
      f.touch();
      const ms = f.hold('a');
      if (ms === 0) break;
      held += 50;
      t += 50;
      assert.ok(held <= MAX_HOLD_MS, `held ${held} ms`);
    }
    assert.equal(held, MAX_HOLD_MS);
    // The next hold of the same key starts a new window; another key has its own.
    f.touch();
    assert.ok(f.hold('a') > 0);
    t += MAX_HOLD_MS - 1;
    f.touch();
    assert.ok(f.hold('a') > 0);
    assert.ok(f.hold('b') > 0);
  });

  it('released keys start over', () => {
    const f = fg();
    f.touch();
    f.hold('a');
    t += MAX_HOLD_MS - 10;
    f.release('a');
    f.touch();
    assert.equal(f.hold('a'), QUIET_MS);
  });
});

describe('warm pool refill policy', () => {
  let t = 0;
  let fg: Foreground;
  beforeEach(() => {
    mock.timers.enable({ apis: ['Date'], now: 1_000_000 });
    t = 1_000;
    fg = new Foreground(() => t);
  });
  afterEach(() => mock.timers.reset());
  const advance = (ms: number) => {
    mock.timers.tick(ms);
    t += ms;
  };

  it('fills a new pool at once, then debounces refills and yields them to arriving claims', () => {
    const p = new RefillPolicy(0, fg);
    assert.equal(p.wait('u', 0, 10), 0, 'initial fill is not delayed');
    assert.equal(p.wait('u', 10, 10), 0);
    fg.touch();
    assert.equal(p.wait('u', 9, 10), REFILL_COALESCE_MS, 'a departure is debounced');
    advance(REFILL_COALESCE_MS);
    assert.ok(p.wait('u', 9, 10) > 0, 'then it waits for the claims');
    advance(QUIET_MS);
    assert.equal(p.wait('u', 9, 10), 0, 'quiet: refill');
  });

  it('refills at once below half the pool, claims or not', () => {
    const p = new RefillPolicy(0, fg);
    p.wait('u', 10, 10);
    fg.begin();
    assert.equal(p.wait('u', 4, 10), 0);
  });

  it('writes a changing status at most every STATUS_MIN_INTERVAL_MS, a settled one at once', () => {
    const p = new RefillPolicy(0, fg);
    assert.equal(p.statusDelay('u', false), 0);
    p.statusWritten('u');
    advance(100);
    assert.equal(p.statusDelay('u', false), STATUS_MIN_INTERVAL_MS - 100);
    assert.equal(p.statusDelay('u', true), 0);
    advance(STATUS_MIN_INTERVAL_MS);
    assert.equal(p.statusDelay('u', false), 0);
  });

  it('paces creates at --sandbox-warm-pool-max-refill-rate', () => {
    const p = new RefillPolicy(2, fg);
    const first = p.take('u', 5);
    assert.equal(first.granted, 2);
    assert.ok(first.retryMs > 0 && first.retryMs <= 500);
    advance(500);
    assert.equal(p.take('u', 3).granted, 1);
  });
});

describe('warm member names', () => {
  it('are <pool>-xxxxx from the apiserver alphabet, the prefix cut to 58 characters like generateName', () => {
    assert.match(memberName('pool'), /^pool-[bcdfghjklmnpqrstvwxz2456789]{5}$/);
    const long = memberName('p'.repeat(70));
    assert.equal(long.length, 63);
    assert.ok(long.startsWith('p'.repeat(58)));
    assert.notEqual(memberName('pool'), memberName('pool'));
  });
});
