/**
 * Every HTTP listener of the registry (http-registry.ts) against every hostile case (http-cases.ts). Per case: no
 * uncaught exception or unhandled rejection fired (either one ends a daemon: node's default), and the listener
 * still answers its good request. Per listener, at the end: its open connections are back to where they were
 * (nothing leaked: every connection a case opened and let go of is gone), and the heap grew boundedly.
 *
 * Seeded and bounded: about a minute here; `SBX_HOSTILE_LONG=1` (bench/hostile-http.ts) runs more and longer.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { cases, LONG } from './http-cases.js';
import { targets, type Running } from './http-registry.js';
import { exchange, status } from './http-wire.js';

const fired: Array<{ kind: string; err: unknown }> = [];
const onUncaught = (err: unknown) => fired.push({ kind: 'uncaughtException', err });
const onRejection = (err: unknown) => fired.push({ kind: 'unhandledRejection', err });

async function connections(r: Running): Promise<number | undefined> {
  const server = r.server;
  if (!server) return undefined;
  return new Promise((resolve) => server.getConnections((_e, n) => resolve(n)));
}

async function settleTo(r: Running, baseline: number | undefined, ms: number): Promise<number | undefined> {
  const until = Date.now() + ms;
  let n = await connections(r);
  while (n !== undefined && baseline !== undefined && n > baseline && Date.now() < until) {
    await new Promise((res) => setTimeout(res, 50));
    n = await connections(r);
  }
  return n;
}

before(() => {
  process.on('uncaughtException', onUncaught);
  process.on('unhandledRejection', onRejection);
});
after(() => {
  process.off('uncaughtException', onUncaught);
  process.off('unhandledRejection', onRejection);
});

for (const target of targets) {
  describe(`hostile HTTP: ${target.name}`, { timeout: LONG ? 3_600_000 : 120_000 }, () => {
    let running: Running;
    before(async () => {
      running = await target.start();
    });
    after(() => running.close());

    it('survives every case, answers after each, and leaks no connection', async () => {
      const baseline = await connections(running);
      const heap0 = process.memoryUsage().heapUsed;
      for (const c of cases) {
        const before = fired.length;
        await exchange(running.port, target.tls, c.chunks(target), c.holdMs ?? 50);
        // let the listener run what the bytes started (a rejection surfaces a tick or two later)
        await new Promise((r) => setImmediate(r));
        const code = await status(running.port, target.tls, target.good, target.headers).catch(
          (err: unknown) => `no answer: ${(err as Error).message}`,
        );
        assert.deepEqual(
          fired.slice(before).map((f) => `${f.kind}: ${String((f.err as Error)?.message ?? f.err)}`),
          [],
          `case "${c.name}": nothing may escape the listener's error handling`,
        );
        assert.equal(code, target.good.status, `case "${c.name}": the next good request is answered`);
      }
      const left = await settleTo(running, baseline, 5_000);
      if (left !== undefined)
        assert.ok(left <= baseline!, `${left} connections open after the run, ${baseline} before`);
      const grown = (process.memoryUsage().heapUsed - heap0) / 2 ** 20;
      assert.ok(grown < 256, `heap grew ${grown.toFixed(0)} MiB over ${cases.length} cases`);
    });
  });
}
