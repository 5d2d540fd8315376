import { Command } from 'commander';
import { errorMessage } from '../errors.js';
import { registerCommands } from './commands/index.js';

const program = new Command('sbx')
  .description('sandbox-operator: agent sandboxes on Kubernetes, backed by real microVMs')
  .showHelpAfterError();
registerCommands(program);

try {
  await program.parseAsync(process.argv);
} catch (err) {
  process.stderr.write(`sbx: ${errorMessage(err)}\n`);
  process.exitCode = process.exitCode || 1;
}
