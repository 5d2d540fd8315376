/**
 * Container args from the binaries' own option definitions (the commander Commands each main parses): a flag the
 * manifests pass but the binary no longer defines fails the generator (and so the drift test and the build), and
 * every value the manifests pass is parsed by the binary's own parser at generate time.
 */
import type { Command } from 'commander';
import { SandboxError } from '../errors.js';
import { concrete, Param, type ParamFactory } from './params.js';

export type FlagValue = string | number | boolean | Param;

export interface FlagSet {
  /** The binary, as its Command names itself (sandbox-operator, sandboxd, sandbox-apiserver). */
  command: () => Command;
  flags: ReadonlyArray<readonly [name: string, value: FlagValue]>;
}

/** `--name=value` for each flag, after checking each against the binary's definitions. */
export function containerArgs(set: FlagSet, p: ParamFactory): Array<string | Param> {
  const cmd = set.command();
  const known = new Set(cmd.options.map((o) => o.long));
  const unknown = set.flags.filter(([name]) => !known.has(`--${name}`)).map(([name]) => `--${name}`);
  if (unknown.length)
    throw new SandboxError('deploy.flags', `${cmd.name()} defines no ${unknown.join(', ')}`, {
      hint: `a flag was renamed or removed: update src/deploy/components.ts to what \`${cmd.name()} --help\` lists`,
    });
  const args = set.flags.map(([name, value]) =>
    value instanceof Param ? p.join([`--${name}=`, value]) : `--${name}=${String(value)}`,
  );
  parseWithBinary(cmd, args);
  return args;
}

/** Run the binary's own option parsing (its argParsers validate numbers, booleans and durations) over `args`. */
function parseWithBinary(cmd: Command, args: ReadonlyArray<string | Param>): void {
  // Downward-API references ($(POD_IP)) are the kubelet's to expand; give the parser something of the same shape.
  const argv = args.map((a) => {
    const v = concrete(a);
    return typeof v === 'string'
      ? v.replace(/\$\((\w+)\)/g, (_m, name: string) => SAMPLE_ENV[name] ?? name)
      : String(v);
  });
  cmd.exitOverride().configureOutput({ writeErr: () => {}, writeOut: () => {} });
  try {
    cmd.parse(argv, { from: 'user' });
  } catch (err) {
    throw new SandboxError('deploy.flags', `${cmd.name()} rejects ${argv.join(' ')}: ${(err as Error).message}`, {
      hint: 'fix the value in src/deploy/components.ts or src/deploy/values.ts',
    });
  }
}

/** Sample values of the environment variables the manifests set from the downward API. */
const SAMPLE_ENV: Record<string, string> = { POD_IP: '10.0.0.1', NODE_NAME: 'node-1', POD_NAMESPACE: 'sandbox-system' };
