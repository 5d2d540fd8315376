import { errorMessage } from '../errors.js';
import { createLogger } from '../log/logger.js';
import { buildApiServer } from './build.js';
import { apiServerCommand, toApiServerConfig } from './options.js';

const stop = new AbortController();
for (const sig of ['SIGINT', 'SIGTERM'] as const) process.on(sig, () => stop.abort());
try {
  const config = toApiServerConfig(apiServerCommand().parse(process.argv).opts());
  const log = createLogger({ level: config.logLevel, name: 'sandbox-apiserver' });
  const server = await buildApiServer(config, log);
  process.stdout.write(`sandbox-apiserver listening on ${server.address.address}:${server.address.port}\n`);
  await server.run(stop.signal);
} catch (err) {
  process.stderr.write(`sandbox-apiserver: ${errorMessage(err)}\n`);
  process.exitCode = 1;
}
