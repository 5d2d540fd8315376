import { setTimeout as sleep } from 'node:timers/promises';

/**
 * Poll until `fn` returns without throwing (and, if given, `until` accepts its value). Tests assert the final
 * state of the world and expect delay, as controller-runtime's envtest advises.
 */
export async function eventually<T>(
  fn: () => Promise<T> | T,
  opts: { timeoutMs?: number; intervalMs?: number; until?: (v: T) => boolean; what?: string } = {},
): Promise<T> {
  const deadline = Date.now() + (opts.timeoutMs ?? 30_000);
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (!opts.until || opts.until(v)) return v;
      // Kubernetes objects: the status says why; metadata (managedFields) would fill the message.
      const shown = v && typeof v === 'object' && 'status' in v ? { status: (v as { status: unknown }).status } : v;
      last = new Error(`condition not met; last value: ${JSON.stringify(shown)?.slice(0, 1500)}`);
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) {
      const msg = last instanceof Error ? last.message : String(last);
      throw new Error(
        `timed out after ${opts.timeoutMs ?? 30_000} ms${opts.what ? ` waiting for ${opts.what}` : ''}: ${msg}`,
      );
    }
    await sleep(opts.intervalMs ?? 100);
  }
}
