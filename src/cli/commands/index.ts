import type { Command } from 'commander';

/** Every command module exports `register(program)`; add one line per module here. */
export function registerCommands(program: Command): void {
  void program;
}
