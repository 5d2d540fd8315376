/**
 * Claims before refills on the real control plane (docs/extensions.md "Claim: the L1 fast path", step 6): while
 * claims keep arriving, the pool's refill waits (src/operator/foreground.ts); once they stop, it starts within
 * QUIET_MS and a pass or two, and the pool is full again soon after.
 *
 * The claims are started on a fixed schedule (one every PACE_MS, not waiting for each other), so they keep
 * arriving however slow each create is. The stream is longer than the refill's debounce (REFILL_MAX_DELAY_MS: without
 * the gating the refill starts about then, while claims still arrive) and shorter than the debounce plus
 * MAX_HOLD_MS (after which the refill would go regardless, so a refill that merely waited for that bound is late).
 */
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { fnv1a32, LabelKeys } from '../../src/api/index.js';
import { SandboxClaims, Sandboxes } from '../../src/kube/index.js';
import { REFILL_MAX_DELAY_MS } from '../../src/operator/extensions/warm-pool-refill.js';
import type { SandboxObj } from '../../src/operator/extensions/support.js';
import { MAX_HOLD_MS, QUIET_MS } from '../../src/operator/foreground.js';
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

const POOL = 64;
const PACE_MS = 60;
const STREAM_MS = REFILL_MAX_DELAY_MS + 600;
/** Fewer than half the pool: below half, a refill goes at once by design (the pool must not run dry). */
const CLAIMS = Math.min(Math.floor(STREAM_MS / PACE_MS) + 1, POOL / 2 - 2);
/** From the last claim's create answered to the first refill member seen: QUIET_MS, the last claims' passes, a pool pass. */
const START_BOUND_MS = QUIET_MS + 1_000;
/**
 * The pool is full again soon after the last claim. The 5 s acceptance figure is a performance target, measured by
 * bench/claim (PERFORMANCE.md: 1-2.4 s); a timed test only checks that the refill, once started (START_BOUND_MS), is
 * not held back, with room for a loaded CI machine (a run with other tests beside it took 5.7 s).
 */
const REFILL_BOUND_MS = 15_000;

describe('claims before refills (foreground gating)', () => {
  let env: Env;
  before(async () => {
    env = await setupEnv('claim-fg');
    await createAll(env.client, templateManifest(env.ns, 'tpl'), poolManifest(env.ns, 'pool', 'tpl', POOL));
    await waitPoolReady(env.ns, 'pool', POOL, 180_000);
  });
  after(() => env?.stop());

  /**
   * One stream of CLAIMS claims (names `r<round>-<i>`) and the refill after it, timed from the test's side. The pool
   * is full again when it returns.
   */
  async function stream(round: number) {
    const selector = `${LabelKeys.warmPoolSandbox}=${fnv1a32('pool')}`;
    const list = await env.client.list<SandboxObj>(Sandboxes, env.ns, { labelSelector: selector });
    const warm = new Set(list.items.map((s) => s.metadata.name!));
    assert.equal(warm.size, POOL);

    // Every member the pool creates from now on, stamped when its watch event arrives, and when the last of the
    // claims' replacements was Ready (the pool's status is not written while its refill waits, so it cannot say).
    const created: number[] = [];
    const ready = new Set<string>();
    let refilled = Infinity;
    const ctrl = new AbortController();
    const watching = env.client
      .watch<SandboxObj>(
        Sandboxes,
        env.ns,
        { resourceVersion: list.metadata.resourceVersion, labelSelector: selector },
        (ev) => {
          const name = ev.object.metadata.name!;
          if (warm.has(name)) return;
          if (ev.type === 'ADDED') created.push(performance.now());
          if (ev.type !== 'DELETED' && cond(ev.object)?.status === 'True' && !ready.has(name)) {
            ready.add(name);
            if (ready.size === CLAIMS) refilled = performance.now();
          }
        },
        ctrl.signal,
      )
      .catch((err: unknown) => {
        if (!ctrl.signal.aborted) throw err;
      });

    const t0 = performance.now();
    const started: number[] = [];
    const answered: number[] = [];
    await Promise.all(
      Array.from({ length: CLAIMS }, async (_, i) => {
        await sleep(Math.max(0, t0 + i * PACE_MS - performance.now()));
        started.push(performance.now());
        await env.client.create(SandboxClaims, claimManifest(env.ns, `r${round}-${i}`, 'pool'));
        answered.push(performance.now());
      }),
    );
    started.sort((a, b) => a - b);
    answered.sort((a, b) => a - b);
    const gap = Math.max(...started.slice(1).map((t, i) => t - started[i]!));
    // If the test itself stalled, claims were not arriving and the refill could rightly go: say so, not "gating broke".
    assert.ok(gap < QUIET_MS, `claims did not keep arriving: a ${gap.toFixed(0)} ms gap between two creates`);
    assert.ok(started.at(-1)! - t0 > REFILL_MAX_DELAY_MS, 'the stream outlasts the refill debounce');

    for (let i = 0; i < CLAIMS; i++) await waitClaim(env.ns, `r${round}-${i}`);
    const full = performance.now();
    await eventually(() => ready.size, { until: (n) => n >= CLAIMS, timeoutMs: 60_000, what: 'the refill Ready' });
    const pool = await waitPoolReady(env.ns, 'pool', POOL, 30_000);
    ctrl.abort();
    await watching;
    assert.ok(created.length > 0, 'the pool refilled');
    assert.equal(pool.status?.readyReplicas, POOL);
    return { t0, started, answered, first: Math.min(...created), full, refilled };
  }

  it('a refill does not start while claims keep arriving, and starts within its bound once they stop', async (t) => {
    assert.ok(STREAM_MS < REFILL_MAX_DELAY_MS + MAX_HOLD_MS - QUIET_MS, 'the stream ends before the hold bound');
    // The test paces the creates it sends, but the operator sees claims as the apiserver accepts them: on a loaded
    // machine (an etcd fsync stall) the apiserver can answer a run of creates in one burst after a pause of more than
    // QUIET_MS, and the operator then rightly sees a quiet moment. A round with such a pause before the first refill
    // member cannot judge the gating; it is reported and run again, up to three rounds.
    for (let round = 0; ; round++) {
      const { t0, started, answered, first, full, refilled } = await stream(round);
      const at = (x: number) => `${(x - t0).toFixed(0)} ms`;
      const lastStart = started.at(-1)!;
      const lastAnswer = answered.at(-1)!;
      const timeline = `claims ${CLAIMS} from 0 to ${at(lastStart)} (last answered ${at(lastAnswer)}), all Ready by ${at(full)}; first refill member ${at(first)}`;
      const pause = answered.findIndex(
        (x, i) => i > 0 && x - answered[i - 1]! >= QUIET_MS && answered[i - 1]! + QUIET_MS <= first,
      );
      if (first <= lastStart && pause > 0 && round < 2) {
        t.diagnostic(
          `round ${round} not judged: the apiserver answered no create for ${(answered[pause]! - answered[pause - 1]!).toFixed(0)} ms from ${at(answered[pause - 1]!)}; ${timeline}`,
        );
        continue;
      }
      assert.ok(first > lastStart, `a refill member was created while claims were arriving: ${timeline}`);
      assert.ok(
        first - lastAnswer <= START_BOUND_MS,
        `the refill started ${(first - lastAnswer).toFixed(0)} ms after the last claim (bound ${START_BOUND_MS}): ${timeline}`,
      );
      assert.ok(
        refilled - lastAnswer <= REFILL_BOUND_MS,
        `the pool was full ${(refilled - lastAnswer).toFixed(0)} ms after the last claim (bound ${REFILL_BOUND_MS})`,
      );
      t.diagnostic(`round ${round}: ${timeline}; pool full ${at(refilled)}`);
      return;
    }
  });
});
