/** Run `n` timed operations `concurrency` at a time; returns the latencies (ms). */
export async function timed(n: number, concurrency: number, op: (i: number) => Promise<void>): Promise<number[]> {
  const out: number[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(concurrency, n) }, async () => {
      while (next < n) {
        const i = next++;
        const t0 = performance.now();
        await op(i);
        out.push(performance.now() - t0);
      }
    }),
  );
  return out;
}
