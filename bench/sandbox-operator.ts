/**
 * The operator as bench/sandbox.ts runs it: the real entry point's flags and composition root, plus SIGUSR2 →
 * a forced resync of every informer (manager.resyncAll()), so the bench can measure what a resync writes, and
 * SIGHUP → a full GC (when run with --expose-gc) before memory readings.
 */
import { errorMessage } from '../src/errors.js';
import { createLogger } from '../src/log/logger.js';
import { buildOperator } from '../src/operator/build.js';
import '../src/operator/controllers.js';
import { operatorCommand, toConfig } from '../src/operator/options.js';

try {
  const config = toConfig(operatorCommand().parse(process.argv).opts());
  const operator = await buildOperator(config, createLogger({ level: config.logLevel, name: 'sandbox-operator' }));
  const stop = new AbortController();
  for (const sig of ['SIGINT', 'SIGTERM'] as const) process.on(sig, () => stop.abort());
  process.on('SIGUSR2', () => operator.manager.resyncAll());
  // With --expose-gc, SIGHUP collects garbage so the bench reads a settled heap and RSS.
  process.on('SIGHUP', () => (globalThis as { gc?: () => void }).gc?.());
  await operator.run(stop.signal);
  process.exit(0);
} catch (err) {
  process.stderr.write(`sandbox-operator: ${errorMessage(err)}\n`);
  process.exit(1);
}
