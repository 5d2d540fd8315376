/**
 * Heap allocated by one resolved Get of the aggregated server (index lookup, the Sandbox materialized, serialized as
 * the response body): bursts of Gets by name, measured as the heap growth over a burst in a process started with
 * `--expose-gc --max-semi-space-size=256` (no scavenge happens during a burst). The median of 5 bursts.
 */
import { SANDBOX_RENDERER } from '../../src/apiserver/sandboxes/storage.js';
import type { SandboxStore } from '../../src/apiserver/sandboxes/store.js';

export function heapPerGet(store: SandboxStore, names: readonly string[]): number {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error('run with --expose-gc --max-semi-space-size=256');
  const bodies: string[] = new Array(names.length);
  const burst = () => {
    for (let i = 0; i < names.length; i++) bodies[i] = JSON.stringify(SANDBOX_RENDERER.toObject(store.get(names[i]!)!));
  };
  burst(); // warm up (JIT, hidden classes)
  const samples: number[] = [];
  for (let round = 0; round < 5; round++) {
    gc();
    const before = process.memoryUsage().heapUsed;
    burst();
    samples.push((process.memoryUsage().heapUsed - before) / names.length);
  }
  samples.sort((a, b) => a - b);
  return samples[2]!;
}
