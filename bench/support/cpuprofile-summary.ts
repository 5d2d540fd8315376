/**
 * Where a Node process spent its CPU, from a `.cpuprofile` (`--cpu-prof`; SBX_PROFILE for platform components):
 * self time per function and per file, top N, with the profile's idle, GC and program shares.
 *
 *   node --import tsx bench/support/cpuprofile-summary.ts <file.cpuprofile> [--top 25]
 */
import { readFileSync } from 'node:fs';
import { relative } from 'node:path';
import { parseArgs } from 'node:util';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
  startTime: number;
  endTime: number;
}

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { top: { type: 'string', default: '25' } },
});
const file = positionals[0];
if (!file) throw new Error('usage: cpuprofile-summary.ts <file.cpuprofile> [--top N]');
const top = Number(values.top);
const p = JSON.parse(readFileSync(file, 'utf8')) as Profile;
const byId = new Map(p.nodes.map((n) => [n.id, n]));
const selfUs = new Map<number, number>();
p.samples.forEach((id, i) => selfUs.set(id, (selfUs.get(id) ?? 0) + (p.timeDeltas[i] ?? 0)));
const total = p.endTime - p.startTime;
const short = (url: string) =>
  (url.startsWith('file://') ? relative(process.cwd(), new URL(url).pathname) : url) || '(native)';
const fn = new Map<string, number>();
const files = new Map<string, number>();
let idle = 0;
let gc = 0;
for (const [id, us] of selfUs) {
  const f = byId.get(id)!.callFrame;
  if (f.functionName === '(idle)') idle += us;
  else if (f.functionName === '(garbage collector)') gc += us;
  const key = `${f.functionName || '(anonymous)'} ${short(f.url)}:${f.lineNumber + 1}`;
  fn.set(key, (fn.get(key) ?? 0) + us);
  if (f.functionName !== '(idle)') files.set(short(f.url), (files.get(short(f.url)) ?? 0) + us);
}
const pctOf = (us: number) => `${((us / total) * 100).toFixed(1)} %`;
const busy = total - idle;
console.log(
  `${file}: ${(total / 1e6).toFixed(1)} s profiled; busy ${(busy / 1e6).toFixed(1)} s (${pctOf(busy)}), of which GC ${(gc / 1e6).toFixed(1)} s (${((gc / busy) * 100).toFixed(1)} % of busy)`,
);
const list = (m: Map<string, number>, title: string) => {
  console.log(title);
  for (const [k, us] of [...m]
    .filter(([k]) => !k.startsWith('(idle)'))
    .sort((a, b) => b[1] - a[1])
    .slice(0, top))
    console.log(
      `  ${((us / busy) * 100).toFixed(1).padStart(5)} % of busy  ${(us / 1000).toFixed(0).padStart(7)} ms  ${k}`,
    );
};
list(fn, 'self time by function:');
list(files, 'self time by file:');
