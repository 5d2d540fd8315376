import type { ErrorCode } from './error-codes.js';

/**
 * The one root of every error this project throws. `code` is stable (tests and callers match on it) and is one of
 * the table in src/error-codes.ts, which also gives its HTTP status; `hint` says what to do next, so every error a
 * person sees carries its remedy.
 */
export class SandboxError extends Error {
  readonly code: ErrorCode;
  readonly hint: string | undefined;

  constructor(code: ErrorCode, message: string, options: { cause?: unknown; hint?: string } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'SandboxError';
    this.code = code;
    this.hint = options.hint;
  }

  /** Message plus hint, for a terminal. */
  describe(): string {
    return this.hint ? `${this.message}\n  hint: ${this.hint}` : this.message;
  }
}

export function errorMessage(err: unknown): string {
  if (err instanceof SandboxError) return err.describe();
  if (err instanceof Error) return err.message;
  return String(err);
}
