import { errorMessage } from '../errors.js';
import { createLogger } from '../log/logger.js';
import { buildOperator } from './build.js';
import './controllers.js';
import { operatorCommand, toConfig } from './options.js';

const cmd = operatorCommand().parse(process.argv);
if (cmd.opts().version) {
  process.stdout.write('sandbox-operator 0.1.0\n');
  process.exit(0);
}
try {
  const config = toConfig(cmd.opts());
  const log = createLogger({ level: config.logLevel, name: 'sandbox-operator' });
  const operator = await buildOperator(config, log);
  const stop = new AbortController();
  for (const sig of ['SIGINT', 'SIGTERM'] as const) process.on(sig, () => stop.abort());
  await operator.run(stop.signal);
} catch (err) {
  process.stderr.write(`sandbox-operator: ${errorMessage(err)}\n`);
  process.exit(1);
}
