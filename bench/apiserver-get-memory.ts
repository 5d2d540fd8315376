/**
 * bench/apiserver-get-memory: heap allocated by one resolved Get of the aggregated server (index lookup, the
 * Sandbox materialized, serialized as the response body), at several fleet sizes, in one process. The store is
 * filled with SIMULATED entries (rows with no VM behind them). Run with a young generation large enough that no
 * scavenge happens during a burst, so the heap growth over a burst is what the burst allocated:
 *
 *   node --expose-gc --max-semi-space-size=256 --import tsx bench/apiserver-get-memory.ts [--sizes 1000,10000,50000]
 *
 * The reference system materialized every sandbox of the fleet per Get (~1.4 KB each); this must stay flat.
 */
import { parseArgs } from 'node:util';
import type { NodeRow } from '../src/apiserver/sandboxes/entry.js';
import { EventLog } from '../src/apiserver/sandboxes/event-log.js';
import { SandboxStore } from '../src/apiserver/sandboxes/store.js';
import { silentLogger } from '../src/log/logger.js';
import { heapPerGet } from './support/heap-per-get.js';

const { values } = parseArgs({
  options: { sizes: { type: 'string', default: '1000,10000,50000' }, gets: { type: 'string', default: '2000' } },
});

function simulatedRow(k: number): NodeRow {
  const name = `sim-${String(k).padStart(6, '0')}`;
  return {
    id: `sb_sim${k.toString(16)}`,
    key: { template: 'sandbox/minimal', net: 'none', size: 'small' },
    deadline: '2099-01-01T00:00:00.000Z',
    claimed_at: '2026-12-01T00:00:00.000Z',
    hibernated: false,
    rv: k + 1,
    object: {
      metadata: {
        name,
        namespace: 'sim',
        uid: `uid-${k}`,
        creationTimestamp: '2026-12-01T00:00:00Z',
        labels: { 'sandbox.cocoonstack.io/simulated': 'true' },
      },
      spec: { podTemplate: { spec: { containers: [{ name: 'main', image: 'sandbox/minimal' }] } } },
    },
  };
}

const gets = Number(values.gets);
const results: Array<{ size: number; bytesPerGet: number }> = [];
for (const size of values.sizes.split(',').map(Number)) {
  const store = new SandboxStore(silentLogger, new EventLog(1000));
  for (let k = 0; k < size; k++) store.upsert(`sim-node-${k % 20}`, '10.0.0.1:7777', simulatedRow(k));
  const names = Array.from({ length: gets }, (_, i) => `sim/sim-${String((i * 7919) % size).padStart(6, '0')}`);
  results.push({ size, bytesPerGet: heapPerGet(store, names) });
}
const base = results[0]!;
process.stdout.write('fleet size | bytes allocated per Get (median of 5 bursts) | ratio to the smallest\n');
for (const r of results)
  process.stdout.write(
    `${String(r.size).padStart(10)} | ${r.bytesPerGet.toFixed(0).padStart(8)} | ${(r.bytesPerGet / base.bytesPerGet).toFixed(2)}x\n`,
  );
