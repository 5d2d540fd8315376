import { SandboxError } from '../../errors.js';

/** A conversion that cannot be performed (bad state annotation, unknown kind or version). */
export class ConversionError extends SandboxError {
  constructor(message: string, options: { cause?: unknown; hint?: string } = {}) {
    super('conversion.failed', message, options);
    this.name = 'ConversionError';
  }
}
