import { after } from 'node:test';

/**
 * Runs `stop` once the test file is done with what this process started for itself (a private control plane when a
 * file is run on its own). Under the test runner that is the file's root `after` hook: `beforeExit` never fires
 * there, because the cluster's child processes and sockets keep the event loop alive, so the file would pass and
 * never exit. Must be called while the module is evaluated (top level of a support module), when the root is the
 * only test `after` can attach to; `beforeExit` covers a plain `node` process.
 */
export function onFileTeardown(stop: () => Promise<void> | void): void {
  let stopped: Promise<void> | undefined;
  const once = () => (stopped ??= Promise.resolve().then(stop));
  if (process.env.NODE_TEST_CONTEXT) after(once);
  else process.on('beforeExit', () => void once());
}
