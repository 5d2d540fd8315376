/**
 * bench/scale/clone-time — the real engine's clone time on this machine, which `sandboxd --engine=sim` takes as its
 * default clone delay (src/vmm/sim-driver.ts SIM_CLONE_MS): a real NodeEngine (QEMU microVMs, template
 * sandbox/minimal, the daemon's defaults: refill concurrency 2, one spare VMM) refills a pool from 0 to `--vms`
 * with priming off, and every driver.clone() inside the refill is timed from call to the clone's agent answering.
 *
 *   flock /tmp/sbx-heavy.lock node --import tsx bench/scale/clone-time.ts [--vms 30] [--rounds 2]
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import { NodeEngine } from '../../src/sandboxd/engine.js';
import { QemuMicrovmDriver, type CloneOptions, type Template, type Vm } from '../../src/vmm/index.js';
import { percentile } from '../claim-driver.js';
import { machineIdleSettings } from '../machine.js';

const { values } = parseArgs({
  options: { vms: { type: 'string', default: '30' }, rounds: { type: 'string', default: '2' } },
});
const VMS = Number(values.vms);
const ROUNDS = Number(values.rounds);
const KEY = { template: 'sandbox/minimal', net: 'none', size: 'small' } as const;

/** The real driver, with each clone timed. */
class TimedDriver extends QemuMicrovmDriver {
  readonly ms: number[] = [];
  override async clone(template: Template, opts?: CloneOptions): Promise<Vm> {
    const t0 = performance.now();
    const vm = await super.clone(template, opts);
    this.ms.push(performance.now() - t0);
    return vm;
  }
}

const dir = await mkdtemp(join(tmpdir(), 'sbx-clone-time-'));
const runRoot = join(dir, 'vms');
const driver = new TimedDriver({ runRoot, spareVmms: 1 });
const engine = new NodeEngine({
  dataDir: dir,
  nodeName: 'clone-time',
  advertiseAddr: '127.0.0.1:1',
  driver,
  primeWarmVms: false,
  runRoot,
});
try {
  await engine.start();
  await engine.prepare(KEY);
  const fills: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    driver.ms.length = 0;
    const t0 = performance.now();
    engine.setTargets([{ key: KEY, warm: VMS }]);
    while (engine.warmCount(KEY) < VMS) await sleep(20);
    fills.push(performance.now() - t0);
    const sorted = [...driver.ms].sort((a, b) => a - b);
    process.stdout.write(
      `round ${r + 1}: ${VMS} clones in ${(fills[r]! / 1000).toFixed(2)} s (${((VMS * 1000) / fills[r]!).toFixed(1)} VMs/s), clone p50 ${percentile(sorted, 50).toFixed(1)} ms, p90 ${percentile(sorted, 90).toFixed(1)} ms\n`,
    );
    engine.setTargets([]);
    while (engine.warmCount(KEY) > 0) await sleep(20);
    await sleep(1000);
  }
  process.stdout.write(`machine: ${machineIdleSettings()}\n`);
} finally {
  await engine.close({ destroyVms: true });
  await rm(dir, { recursive: true, force: true });
}
