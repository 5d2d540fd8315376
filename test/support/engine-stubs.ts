/**
 * What stand-ins for sandboxd's engine (tests of envd, the kubelet API, hostile listeners) give for its idle watcher
 * (src/sandboxd/idle.ts): sessions held and released, nothing ever suspended, so no wake.
 */
export const NO_IDLE = {
  touch: (): void => undefined,
  hold: (): (() => void) => () => undefined,
  ensureAwake: async (): Promise<boolean> => false,
};
