/**
 * bench/vm: microVM substrate figures on this machine (`node --import tsx bench/vm/run.ts`).
 * Prints measured values only; targets are shown next to them with PASS/MISS.
 */
import { readFileSync } from 'node:fs';
import { mkdtempSync, rmSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureTemplate, liveQemuPids, QemuMicrovmDriver, type Vm } from '../../src/vmm/index.js';
import { hostShLoopMs, machineIdleSettings, SH_LOOP, STUDY_SH_LOOP_MS } from '../machine.js';

const N_LATENCY = Number(process.env.BENCH_N ?? 20);
const N_DENSITY = Number(process.env.BENCH_DENSITY ?? 50);
const DENSITY_PARALLEL = Number(process.env.BENCH_DENSITY_PARALLEL ?? 4);

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}
const memAvailableKiB = () => Number(/^MemAvailable:\s+(\d+)/m.exec(readFileSync('/proc/meminfo', 'utf8'))![1]);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const rows: [string, string, string, string][] = [];
function report(name: string, value: number, unit: string, target: number, kind: 'max' = 'max'): void {
  const ok = kind === 'max' ? value <= target : false;
  rows.push([
    name,
    `${value.toFixed(unit === 'ms' && value < 10 ? 2 : 1)} ${unit}`,
    `<= ${target} ${unit}`,
    ok ? 'PASS' : 'MISS',
  ]);
  process.stderr.write(`${name}: ${value.toFixed(2)} ${unit} (target <= ${target})\n`);
}

const runRoot = mkdtempSync(join(tmpdir(), 'sbxb-'));
/** With one spare VMM per template, as sandboxd runs it (`--spare-vmms 1`): QEMU start-up and state load happen
 * ahead of the clone. `plainDriver` has none: every clone starts its QEMU (reported next to it). */
const driver = new QemuMicrovmDriver({ runRoot, spareVmms: 1 });
const plainDriver = new QemuMicrovmDriver({ runRoot });
try {
  const tpl = await ensureTemplate(driver, 'sandbox/minimal', {
    progress: (l) => process.stderr.write(`[build] ${l}\n`),
  });

  // How fast this machine runs right now, on the loop the substrate study timed when the targets were set (docs/vm.md
  // "The machine"): every figure below that TCG executes scales with it. Measured here and again at the end (the load
  // moves).
  const speed = async (when: string) => {
    const vm = await plainDriver.clone(tpl);
    try {
      const xs: number[] = [];
      for (let i = 0; i < 3; i++) {
        let t = performance.now();
        await vm.run(['sh', '-c', SH_LOOP]);
        const loop = performance.now() - t;
        t = performance.now();
        await vm.run(['sh', '-c', 'i=0']);
        xs.push(loop - (performance.now() - t));
      }
      const guest = pct(xs, 50);
      const host = hostShLoopMs();
      rows.push([
        `machine speed ${when} (info): busybox sh 20k-iteration loop, guest / host`,
        `${guest.toFixed(0)} / ${host.toFixed(0)} ms`,
        `study: ${STUDY_SH_LOOP_MS.guest} / ${STUDY_SH_LOOP_MS.host} ms`,
        `${(guest / STUDY_SH_LOOP_MS.guest).toFixed(1)}x / ${(host / STUDY_SH_LOOP_MS.host).toFixed(1)}x the study's time`,
      ]);
      process.stderr.write(`machine speed ${when}: sh loop guest ${guest.toFixed(0)} ms, host ${host.toFixed(0)} ms\n`);
    } finally {
      await vm.destroy();
    }
  };
  await speed('at start');

  // Template cold boot (to agent answering): fresh boots into a throwaway template root.
  const coldRoot = mkdtempSync(join(tmpdir(), 'sbxc-'));
  const coldDriver = new QemuMicrovmDriver({ runRoot, templateRoot: coldRoot });
  const boots: number[] = [];
  let coldFailures = 0;
  for (let i = 0; i < 5; i++) {
    try {
      const t = await coldDriver.createTemplate(
        { name: `bench/cold${i}`, image: tpl.image, memoryMiB: tpl.memoryMiB, network: tpl.network },
        { progress: () => undefined },
      );
      boots.push(t.bootMs);
      coldDriver.deleteTemplate(t);
    } catch (err) {
      coldFailures++;
      process.stderr.write(`cold boot ${i} failed: ${(err as Error).message.slice(0, 200)}\n`);
    }
  }
  rmSync(coldRoot, { recursive: true, force: true });
  if (boots.length) report('template cold boot p50', pct(boots, 50), 'ms', 1500);
  if (coldFailures) process.stderr.write(`cold boots failed: ${coldFailures}\n`);

  // Clone -> agent answering, first exec in a fresh clone, warm exec round trip, pause/resume.
  const cloneMs: number[] = [];
  const firstExec: number[] = [];
  const warmExec: number[] = [];
  const pauseMs: number[] = [];
  const resumeMs: number[] = [];
  let failures = 0;
  const failureNotes: string[] = [];
  for (let i = 0; i < N_LATENCY; i++) {
    try {
      let t = performance.now();
      const vm = await driver.clone(tpl);
      cloneMs.push(performance.now() - t);
      t = performance.now();
      await vm.run(['true']);
      firstExec.push(performance.now() - t);
      for (let j = 0; j < 5; j++) {
        t = performance.now();
        await vm.run(['true']);
        warmExec.push(performance.now() - t);
      }
      for (let j = 0; j < 3; j++) {
        t = performance.now();
        await vm.pause();
        pauseMs.push(performance.now() - t);
        t = performance.now();
        await vm.resume();
        resumeMs.push(performance.now() - t);
      }
      await vm.destroy();
    } catch (err) {
      // A VM that dies mid-measurement (this machine is shared) is counted, not hidden.
      failures++;
      failureNotes.push((err as Error).message.slice(0, 160));
      await driver.destroyAll();
    }
  }
  // The same clone with no spare VMM: QEMU start-up and the state load are on the clone's path.
  const plainCloneMs: number[] = [];
  for (let i = 0; i < N_LATENCY; i++) {
    try {
      const t = performance.now();
      const vm = await plainDriver.clone(tpl);
      plainCloneMs.push(performance.now() - t);
      await vm.destroy();
    } catch (err) {
      failures++;
      failureNotes.push((err as Error).message.slice(0, 160));
    }
  }
  report('clone -> agent answering p50 (spare VMM, sandboxd default)', pct(cloneMs, 50), 'ms', 50);
  report('clone -> agent answering p50 (QEMU started by the clone)', pct(plainCloneMs, 50), 'ms', 50);
  report('exec `true` warm round trip p50', pct(warmExec, 50), 'ms', 10);
  report('first exec in a fresh clone p50', pct(firstExec, 50), 'ms', 120);
  report('pause p50', pct(pauseMs, 50), 'ms', 2);
  report('resume p50', pct(resumeMs, 50), 'ms', 2);

  // Density: N clones, MemAvailable delta, time until all answer.
  await sleep(2000);
  const before = memAvailableKiB();
  const vms: Vm[] = [];
  const t0 = performance.now();
  for (let i = 0; i < N_DENSITY; i++) vms.push(await driver.clone(tpl, { readyTimeoutMs: 60_000 }));
  const allReadyMs = performance.now() - t0;
  await sleep(5000);
  const pings: number[] = [];
  for (const vm of vms) {
    try {
      const t = performance.now();
      await vm.agent.ping();
      pings.push(performance.now() - t);
    } catch (err) {
      failures++;
      failureNotes.push(`density ping ${vm.id}: ${(err as Error).message.slice(0, 120)}`);
    }
  }
  const after = memAvailableKiB();
  const perVmMiB = (before - after) / 1024 / N_DENSITY;
  const pss = (await Promise.all(vms.map((v) => v.stats()))).map((s) => (s.pssKiB ?? 0) / 1024);
  const cpu0 = (await Promise.all(vms.map((v) => v.stats()))).reduce((a, s) => a + (s.cpuMs ?? 0), 0);
  await sleep(5000);
  const cpu1 = (await Promise.all(vms.map((v) => v.stats()))).reduce((a, s) => a + (s.cpuMs ?? 0), 0);
  report(`${N_DENSITY} clones ready (one after another)`, allReadyMs / 1000, 's', 3);

  report(`host RAM per idle clone (MemAvailable delta / ${N_DENSITY})`, perVmMiB, 'MB', 20);
  process.stderr.write(
    `PSS per clone p50 ${pct(pss, 50).toFixed(1)} MB; ping with ${N_DENSITY} running p50 ${pct(pings, 50).toFixed(2)} ms; idle CPU ${(((cpu1 - cpu0) / 5000 / N_DENSITY) * 100).toFixed(2)} % of a core per clone\n`,
  );
  rows.push([`PSS per idle clone p50 (info)`, `${pct(pss, 50).toFixed(1)} MB`, '-', '-']);
  rows.push([
    `idle CPU per clone (info)`,
    `${(((cpu1 - cpu0) / 5000 / N_DENSITY) * 100).toFixed(2)} % of a core`,
    '-',
    '-',
  ]);
  rows.push([`agent ping with ${N_DENSITY} clones running p50 (info)`, `${pct(pings, 50).toFixed(2)} ms`, '-', '-']);
  await Promise.all(vms.map((v) => v.destroy()));
  await sleep(2000);

  // The same number again, DENSITY_PARALLEL clones in flight (spare VMMs as above), then destroyed.
  const t1 = performance.now();
  const parallelVms: Vm[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: DENSITY_PARALLEL }, async () => {
      while (next++ < N_DENSITY) parallelVms.push(await driver.clone(tpl, { readyTimeoutMs: 60_000 }));
    }),
  );
  const parallelReadyMs = performance.now() - t1;
  await Promise.all(parallelVms.map((v) => v.destroy()));
  report(`${N_DENSITY} clones ready (${DENSITY_PARALLEL} in flight)`, parallelReadyMs / 1000, 's', 3);

  await speed('at end');

  const load = readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
  console.log(
    `\nmicroVM substrate (bench/vm), ${new Date().toISOString()}, ${cpus().length} cores, accel ${tpl.accel}, ${driver.qemuVersion()}, loadavg at end ${load}; ${machineIdleSettings()}`,
  );
  console.log(
    `samples: ${N_LATENCY} clones for latency (5 warm execs, 3 pause/resume each), 5 cold boots, ${N_DENSITY} clones for density\n`,
  );
  console.log(`VM failures during the run: ${failures}${failureNotes.length ? ` (${failureNotes.join('; ')})` : ''}\n`);
  console.log('| metric | measured | target | |');
  console.log('|---|---|---|---|');
  for (const r of rows) console.log(`| ${r.join(' | ')} |`);
} finally {
  await driver.destroyAll();
  await plainDriver.destroyAll();
  rmSync(runRoot, { recursive: true, force: true });
  if (liveQemuPids().length) console.error(`leaked QEMU pids: ${liveQemuPids().join(' ')}`);
}
