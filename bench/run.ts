/**
 * `npm run bench -- <name> [flags...]`: runs one benchmark (bench/<name>.ts, or bench/<name>/run.ts) with its flags;
 * without a name, lists them. Each takes minutes and starts its own control plane or VMs, so none runs by default.
 */
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const BENCH = dirname(fileURLToPath(import.meta.url));
/** Modules the benchmarks share; not benchmarks themselves. */
const HELPERS = new Set(['run', 'claim-driver', 'machine', 'sandbox-operator']);
/** Folders of shared modules (bench/support), not benchmarks. */
const HELPER_DIRS = new Set(['support']);

function benches(): Array<{ name: string; file: string }> {
  const out: Array<{ name: string; file: string }> = [];
  for (const e of readdirSync(BENCH, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
    if (e.isFile() && e.name.endsWith('.ts') && !HELPERS.has(e.name.slice(0, -3)))
      out.push({ name: e.name.slice(0, -3), file: join(BENCH, e.name) });
    if (e.isDirectory() && !HELPER_DIRS.has(e.name)) {
      for (const f of readdirSync(join(BENCH, e.name))
        .filter((f) => f.endsWith('.ts'))
        .sort())
        out.push({ name: f === 'run.ts' ? e.name : `${e.name}/${f.slice(0, -3)}`, file: join(BENCH, e.name, f) });
    }
  }
  return out;
}

/** The first sentence of a file's doc comment. */
function summary(file: string): string {
  const doc = /\/\*\*([\s\S]*?)\*\//.exec(readFileSync(file, 'utf8'))?.[1] ?? '';
  const text = doc
    .replace(/^\s*\* ?/gm, ' ')
    .replace(/\s+/g, ' ')
    .trim();
  return text.split(/(?<=\.) /)[0] ?? '';
}

const [name, ...args] = process.argv.slice(2);
const all = benches();
const bench = all.find((b) => b.name === name);
if (!bench) {
  if (name) process.stderr.write(`no benchmark "${name}"\n\n`);
  process.stderr.write(
    `usage: npm run bench -- <name> [flags...]   (figures and the commands behind them: PERFORMANCE.md)\n\n`,
  );
  for (const b of all) process.stderr.write(`  ${b.name.padEnd(16)} ${summary(b.file).slice(0, 110)}\n`);
  process.exit(name ? 2 : 0);
}
const child = spawn(process.execPath, ['--import', 'tsx', bench.file, ...args], { stdio: 'inherit' });
for (const sig of ['SIGINT', 'SIGTERM'] as const) process.on(sig, () => child.kill(sig));
child.on('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
