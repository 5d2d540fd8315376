import pino from 'pino';

export type Logger = pino.Logger;

export interface LoggerOptions {
  level?: string;
  name?: string;
  /** File descriptor; default stderr, so stdout stays free for machine-readable output (e.g. `sbx up --detach`). */
  destination?: number;
}

/** Structured JSON logs (pino). Level comes from the caller's options, never from the environment here. */
export function createLogger(opts: LoggerOptions = {}): Logger {
  return pino(
    { level: opts.level ?? 'info', name: opts.name, base: undefined, timestamp: pino.stdTimeFunctions.isoTime },
    pino.destination({ dest: opts.destination ?? 2, sync: true }),
  );
}

/** A logger that drops everything; for libraries used from tests that do not care. */
export const silentLogger: Logger = pino({ level: 'silent' });
