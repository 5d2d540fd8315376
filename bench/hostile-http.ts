/**
 * The long mode of test/hostile's HTTP fuzzer: every listener against 16× the seeded random cases, floods and slow
 * bodies (`SBX_HOSTILE_LONG=1`), for as many seeds as asked. `npm run bench -- hostile-http [--seeds N] [--seed S]`.
 * Exits non-zero on the first seed that fails (its number is printed: rerun it with `SBX_HOSTILE_SEED=<n>`).
 */
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const { values } = parseArgs({
  options: { seeds: { type: 'string', default: '3' }, seed: { type: 'string', default: '28' } },
});
const seeds = Number(values.seeds);
const first = Number(values.seed);
const files = ['test/hostile/http-listeners.test.ts', 'test/hostile/http-amplification.test.ts'];

for (let seed = first; seed < first + seeds; seed++) {
  const t0 = Date.now();
  const r = spawnSync(process.execPath, ['--import', 'tsx', '--test', ...files], {
    cwd: ROOT,
    stdio: ['ignore', 'inherit', 'inherit'],
    env: { ...process.env, SBX_HOSTILE_LONG: '1', SBX_HOSTILE_SEED: String(seed) },
  });
  process.stdout.write(
    `hostile-http seed ${seed}: ${r.status === 0 ? 'ok' : 'FAILED'} in ${(Date.now() - t0) / 1000} s\n`,
  );
  if (r.status !== 0) process.exit(1);
}
