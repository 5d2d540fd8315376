/**
 * The machine settings a latency figure depends on, printed next to it. On a VM whose idle vCPUs halt at once
 * (`haltpoll` with `guest_halt_poll_ns=0`), every wake-up of a process on the other vCPU is an IPI through the
 * hypervisor: ~0.1 ms per loopback round trip here (PERFORMANCE.md, "What this VM's idle setting costs").
 */
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { cpus } from 'node:os';

function read(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch {
    return undefined;
  }
}

export function machineIdleSettings(): string {
  const driver = read('/sys/devices/system/cpu/cpuidle/current_driver') ?? 'none';
  const governor =
    read('/sys/devices/system/cpu/cpuidle/current_governor_ro') ??
    read('/sys/devices/system/cpu/cpuidle/current_governor');
  const pollNs = read('/sys/module/haltpoll/parameters/guest_halt_poll_ns');
  const parts = [`${cpus().length} vCPUs`, `cpuidle ${driver}${governor ? `/${governor}` : ''}`];
  if (pollNs !== undefined) parts.push(`guest_halt_poll_ns=${pollNs}`);
  return parts.join(', ');
}

/**
 * The calibration loop of the substrate study (docs/vm.md "The machine"): busybox sh counting to 20 000 with builtins
 * only.
 */
export const SH_LOOP = 'i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done';
/** What that study measured for SH_LOOP: the figures bench/vm's targets were set from were taken at this speed. */
export const STUDY_SH_LOOP_MS = { host: 22, guest: 415 };

/** The median of `xs` (the mean of the middle two for an even count). */
export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

/** SH_LOOP on this host, median of `runs` (ms): how fast the machine is right now, next to STUDY_SH_LOOP_MS.host. */
export function hostShLoopMs(runs = 5): number {
  const xs: number[] = [];
  for (let i = 0; i < runs; i++) {
    const t = performance.now();
    const r = spawnSync('busybox', ['sh', '-c', SH_LOOP]);
    if (r.status !== 0) throw new Error(`busybox sh failed (${r.status}): is busybox-static installed?`);
    xs.push(performance.now() - t);
  }
  return median(xs);
}

/**
 * Two processes exchanging a small request and answer over a loopback TCP socket with blocking calls, no runtime in
 * between (Python): the machine's round-trip floor for any node-local API, with the two processes on different vCPUs
 * (each answer wakes a halted vCPU), on the same one (no cross-vCPU wake-up) and where the scheduler puts them
 * (`any`, as bench/sandboxd's client and sandboxd run). p50 ms of 3000 round trips.
 */
const PING_PONG = `
import os, socket, sys, time
where = sys.argv[1]
pin = lambda cpu: where != 'any' and os.sched_setaffinity(0, {cpu})
ls = socket.socket(); ls.bind(('127.0.0.1', 0)); ls.listen(1)
port = ls.getsockname()[1]
if os.fork() == 0:
    pin(1 if where == 'cross' else 0)
    c, _ = ls.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while True:
        if not c.recv(4096): os._exit(0)
        c.sendall(b'x' * 250)
pin(0)
s = socket.create_connection(('127.0.0.1', port)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
lat = []
for i in range(3000):
    t = time.perf_counter(); s.sendall(b'y' * 200); s.recv(4096); lat.append(time.perf_counter() - t)
lat.sort(); print(lat[len(lat) // 2] * 1000)
`;

export function socketFloorMs(where: 'cross' | 'same' | 'any'): number | undefined {
  if (cpus().length < 2 && where === 'cross') return undefined;
  const r = spawnSync('python3', ['-c', PING_PONG, where], { encoding: 'utf8', timeout: 60_000 });
  return r.status === 0 ? Number(r.stdout.trim()) : undefined;
}

/** CPU time of all of a process's threads so far (ms, from schedstat: ns resolution, unlike /proc/<pid>/stat's ticks). */
export function processCpuMs(pid: number): number {
  let ns = 0;
  for (const t of readdirSync(`/proc/${pid}/task`)) {
    const s = read(`/proc/${pid}/task/${t}/schedstat`);
    if (s) ns += Number(s.split(' ')[0]);
  }
  return ns / 1e6;
}
