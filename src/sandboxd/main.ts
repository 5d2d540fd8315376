import { errorMessage } from '../errors.js';
import { createLogger } from '../log/logger.js';
import { buildSandboxd } from './build.js';
import { sandboxdCommand, toSandboxdConfig } from './options.js';

const stop = new AbortController();
for (const sig of ['SIGINT', 'SIGTERM'] as const) process.on(sig, () => stop.abort());
// VM teardown waits on unref'd handles; keep the loop alive until shutdown has finished.
const keepAlive = setInterval(() => {}, 1 << 30);
try {
  const config = toSandboxdConfig(sandboxdCommand().parse(process.argv).opts());
  const log = createLogger({ level: config.logLevel, name: 'sandboxd' });
  const daemon = await buildSandboxd(config, log);
  process.stdout.write(`sandboxd listening on ${daemon.address}\n`);
  await daemon.run(stop.signal);
} catch (err) {
  process.stderr.write(`sandboxd: ${errorMessage(err)}\n`);
  process.exitCode = 1;
} finally {
  clearInterval(keepAlive);
  // Shutdown is done (state written; VMs left running unless --destroy-on-exit). The VMs' QMP and agent sockets
  // are still open and would keep the process alive for as long as those VMs run: a SIGTERM never ended a daemon
  // that had live VMs.
  process.exit();
}
