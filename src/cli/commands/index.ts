import type { Command } from 'commander';
import { register as registerPlatform } from './platform.js';
import { register as registerVm } from './vm.js';

/** Every command module exports `register(program)`; add one line per module here. */
export function registerCommands(program: Command): void {
  registerPlatform(program);
  registerVm(program);
}
