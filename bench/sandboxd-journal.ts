/**
 * bench/sandboxd-journal — what it costs that a claim is on disk before it is answered (the claim table's group
 * commit, src/sandboxd/engine-state.ts). sandboxd runs as its own process with the simulated VMM (`--engine=sim`: the
 * claim path above the VMM is all that runs, so the write is not lost in a clone's noise), measured from this
 * process on its claim gateway with a bare keep-alive client, serial (c1) and 16 at once (c16), in rounds that
 * interleave the daemons:
 *   - `fsync`:   the default: the claim's journal line appended and fdatasync'ed before the answer;
 *   - `nosync`:  `--fsync=false`: appended (to the kernel) before the answer, not synced;
 *   - `baseline` (with `--baseline <checkout>`): that checkout's sandboxd, e.g. a worktree of the commit before the
 *     group commit, which answered first and wrote the table 20 ms later;
 * and, in the same run, the floor under them: one journal-sized line appended and fdatasync'ed, serially, in the
 * same filesystem (what a claim now waits for at least, once per group). Group commit shows in the c16 / c1 rate:
 * if each claim waited for its own write, 16 at once could go no faster than one at a time.
 *
 *   node --import tsx bench/sandboxd-journal.ts [--rounds 4] [--claims 200] [--baseline /tmp/wt-head]
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, fdatasyncSync, openSync, writeSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { Agent } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { freePort } from '../src/net/free-port.js';
import { machineIdleSettings } from './machine.js';
import { callJson } from './support/http-json.js';
import { RawHttp } from './support/raw-http.js';

const args = process.argv.slice(2);
const flag = (name: string) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : undefined;
};
const ROUNDS = Number(flag('rounds') ?? 4);
const CLAIMS = Number(flag('claims') ?? 200);
const BASELINE = flag('baseline');
const TOKEN = 'bench-token';
const TEMPLATE = 'sandbox/minimal';
const REPO = fileURLToPath(new URL('..', import.meta.url));
const agent = new Agent({ keepAlive: true, maxSockets: 8 });

interface Daemon {
  name: string;
  child: ChildProcess;
  api: number;
  gateway: number;
  dir: string;
}

async function startDaemon(name: string, checkout: string, extra: string[]): Promise<Daemon> {
  const dir = await mkdtemp(join(tmpdir(), `bench-journal-${name}-`));
  await writeFile(join(dir, 'token'), TOKEN);
  const [api, gateway] = [await freePort(), await freePort()];
  const child = spawn(
    process.execPath,
    [
      join(checkout, 'bin/sandboxd.mjs'),
      `--node-name=bench-${name}`,
      `--listen=127.0.0.1:${api}`,
      `--claim-listen=127.0.0.1:${gateway}`,
      `--data-dir=${join(dir, 'data')}`,
      `--token-file=${join(dir, 'token')}`,
      '--engine=sim',
      '--sim-clone-ms=1',
      '--refill-concurrency=8',
      // No refill while a phase runs: its clones would compete with the claims for the 2 vCPUs.
      '--refill-delay=600000',
      '--max-claims=100000',
      '--vk-nodes=',
      '--log-level=warn',
      '--destroy-on-exit',
      ...extra,
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  await new Promise<void>((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      if (out.includes('sandboxd listening on')) resolve();
    });
    child.once('exit', (code) => reject(new Error(`sandboxd ${name} exited (${code}) before listening`)));
  });
  return { name, child, api, gateway, dir };
}

const call = (d: Daemon, method: string, path: string, body?: unknown) =>
  callJson({ host: '127.0.0.1', port: d.api, agent, token: TOKEN }, method, path, body);

async function fill(d: Daemon, warm: number): Promise<void> {
  await call(d, 'PUT', '/v1/pools', { pools: [{ template: TEMPLATE, warm }] });
  for (;;) {
    const info = await call(d, 'GET', '/v1/info');
    if ((info.json.pools as Array<{ warm: number }> | undefined)?.[0]?.warm === warm) return;
    await sleep(20);
  }
}

/** `n` claims on the gateway, `concurrency` connections at once: latencies (ms), the wall time, the ids. */
async function claims(d: Daemon, n: number, concurrency: number) {
  const body = JSON.stringify({ template: TEMPLATE, ttl_seconds: 600 });
  const lat: number[] = [];
  const ids: string[] = [];
  const conns = await Promise.all(Array.from({ length: concurrency }, () => RawHttp.open(d.gateway, TOKEN)));
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    conns.map(async (c) => {
      while (next < n) {
        next++;
        const s = performance.now();
        const r = await c.post('/v1/claim', body);
        lat.push(performance.now() - s);
        if (r.status !== 200) throw new Error(`${d.name}: claim answered ${r.status} ${r.body}`);
        ids.push((JSON.parse(r.body) as { id: string }).id);
      }
    }),
  );
  const wallMs = performance.now() - t0;
  for (const c of conns) c.close();
  return { lat, wallMs, ids };
}

/** One journal-sized line (a claim record is ~400 bytes) appended and fdatasync'ed, `n` times in a row (ms each). */
function fsyncFloor(dir: string, n: number): number[] {
  const fd = openSync(join(dir, 'floor.journal'), 'a', 0o600);
  const line = Buffer.from(`${JSON.stringify({ put: { id: 'sb_0000000000000000', pad: 'x'.repeat(360) } })}\n`);
  const out: number[] = [];
  try {
    for (let i = 0; i < n; i++) {
      const t0 = performance.now();
      writeSync(fd, line);
      fdatasyncSync(fd);
      out.push(performance.now() - t0);
    }
  } finally {
    closeSync(fd);
  }
  return out;
}

const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(((s.length - 1) * p) / 100))] ?? NaN;
};

async function main(): Promise<void> {
  const daemons = [
    await startDaemon('fsync', REPO, []),
    await startDaemon('nosync', REPO, ['--fsync=false']),
    ...(BASELINE ? [await startDaemon('baseline', BASELINE, [])] : []),
  ];
  const lat = new Map<string, number[]>();
  const rate = new Map<string, number[]>();
  const floor: number[] = [];
  const add = (m: Map<string, number[]>, k: string, xs: number[]) => m.set(k, [...(m.get(k) ?? []), ...xs]);
  try {
    for (const d of daemons) {
      await fill(d, 16);
      await claims(d, 16, 4); // first-use costs (connections, JIT)
    }
    for (let round = 0; round < ROUNDS; round++) {
      floor.push(...fsyncFloor(daemons[0]!.dir, CLAIMS));
      // Each round visits the daemons in a rotated order, so none always goes first.
      for (let k = 0; k < daemons.length; k++) {
        const d = daemons[(round + k) % daemons.length]!;
        for (const conc of [1, 16]) {
          await fill(d, CLAIMS);
          const r = await claims(d, CLAIMS, conc);
          add(lat, `${d.name} c${conc}`, r.lat);
          add(rate, `${d.name} c${conc}`, [(CLAIMS * 1000) / r.wallMs]);
          await Promise.all(r.ids.map((id) => call(d, 'POST', `/v1/sandboxes/${id}/release`)));
        }
      }
    }
  } finally {
    for (const d of daemons) {
      d.child.kill('SIGTERM');
      await new Promise((r) => d.child.once('exit', r));
      await rm(d.dir, { recursive: true, force: true });
    }
    agent.destroy();
  }
  const row = (name: string, xs: number[], extra = '') =>
    `| ${name} | ${xs.length} | ${pct(xs, 50).toFixed(3)} | ${pct(xs, 95).toFixed(3)} | ${pct(xs, 99).toFixed(3)} | ${extra} |`;
  const median = (xs: number[]) => pct(xs, 50);
  console.log(
    `bench/sandboxd-journal — ${new Date().toISOString()}; ${machineIdleSettings()}; ${ROUNDS} rounds x ${CLAIMS} claims per daemon and concurrency, claim gateway, --engine=sim`,
  );
  console.log('| what | n | p50 ms | p95 ms | p99 ms | claims/s (median of rounds) |');
  console.log('|---|---|---|---|---|---|');
  console.log(row('floor: append + fdatasync, serial', floor, `${(1000 / median(floor)).toFixed(0)} /s`));
  for (const [k, xs] of lat) console.log(row(k, xs, median(rate.get(k)!).toFixed(0)));
  const p50 = (k: string) => median(lat.get(k) ?? []);
  console.log(
    `added by the sync (fsync c1 p50 - nosync c1 p50): ${(p50('fsync c1') - p50('nosync c1')).toFixed(3)} ms; bare fdatasync p50 ${median(floor).toFixed(3)} ms`,
  );
  if (BASELINE)
    console.log(
      `fsync / baseline c1 p50: ${(p50('fsync c1') / p50('baseline c1')).toFixed(2)}x; nosync / baseline: ${(p50('nosync c1') / p50('baseline c1')).toFixed(2)}x`,
    );
  // Without group commit each claim would wait for its own write, so 16 at once could not go faster than one at a
  // time; the baseline (no write) shows what the CPU alone allows.
  const gain = (name: string) => median(rate.get(`${name} c16`) ?? []) / median(rate.get(`${name} c1`) ?? []);
  console.log(
    `claims/s c16 / c1: fsync ${gain('fsync').toFixed(2)}x, nosync ${gain('nosync').toFixed(2)}x${BASELINE ? `, baseline ${gain('baseline').toFixed(2)}x` : ''}`,
  );
}

await main();
