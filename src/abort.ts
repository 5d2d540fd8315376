/**
 * A deadline as an AbortSignal that garbage collection cannot cancel. On Node 20, a timeout signal passed only to
 * `AbortSignal.any([..., AbortSignal.timeout(ms)])` is held weakly by the composite and by its own timer, so a
 * collection before it fires drops the deadline: the composite never aborts (Node issue 57736, fixed after 20).
 * A full test run's garbage collections did exactly that to a leader's renewal, which then waited for the client's
 * own 30 s timeout, twice, while a standby took the lease. Here the timer holds the controller strongly.
 */

export interface Deadline {
  /** Aborts when `ms` have passed (reason: a TimeoutError DOMException) or when any parent aborts. */
  readonly signal: AbortSignal;
  /** Stop the timer and drop the listeners on the parents (call when the guarded work is done). */
  clear(): void;
}

export function deadline(ms: number, ...parents: ReadonlyArray<AbortSignal | undefined>): Deadline {
  const c = new AbortController();
  const offs: Array<() => void> = [];
  const clear = () => {
    clearTimeout(timer);
    for (const off of offs.splice(0)) off();
  };
  const abort = (reason: unknown) => {
    clear();
    c.abort(reason);
  };
  const timer = setTimeout(
    () => abort(new DOMException(`The operation was aborted due to timeout (${ms} ms)`, 'TimeoutError')),
    ms,
  );
  timer.unref();
  for (const p of parents) {
    if (!p) continue;
    if (p.aborted) {
      abort(p.reason);
      break;
    }
    const onAbort = () => abort(p.reason);
    p.addEventListener('abort', onAbort, { once: true });
    offs.push(() => p.removeEventListener('abort', onAbort));
  }
  return { signal: c.signal, clear };
}
