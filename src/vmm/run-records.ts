/**
 * Each VM's run dir under the driver's run root and the `vm.json` record in it: what a restarted daemon reads
 * back to adopt, kill or reap the VMs an earlier one started.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pidAlive, pidStartTicks } from './process.js';
import type { VmRecord } from './types.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A fresh VM id, which is also the name of its run dir. */
export function newId(prefix = 'vm'): string {
  return `${prefix}-${randomBytes(4).toString('hex')}`;
}

/** Replace the record in its run dir atomically (a reader never sees half of it). */
export function writeRecord(record: VmRecord): void {
  try {
    const tmp = join(record.runDir, 'vm.json.tmp');
    writeFileSync(tmp, JSON.stringify(record, null, 2));
    renameSync(tmp, join(record.runDir, 'vm.json'));
  } catch {
    /* run dir gone (destroy raced) */
  }
}

/** Every record under the run root, with whether its QEMU still runs (the PID not reused since). */
export function readRecords(runRoot: string): (VmRecord & { alive: boolean })[] {
  const out: (VmRecord & { alive: boolean })[] = [];
  let names: string[] = [];
  try {
    names = readdirSync(runRoot);
  } catch {
    return out;
  }
  for (const name of names) {
    const file = join(runRoot, name, 'vm.json');
    if (!existsSync(file)) continue;
    try {
      const r = JSON.parse(readFileSync(file, 'utf8')) as VmRecord;
      const alive =
        r.pid !== undefined &&
        pidAlive(r.pid) &&
        (r.pidStartTicks === undefined || pidStartTicks(r.pid) === r.pidStartTicks);
      out.push({ ...r, alive });
    } catch {
      /* half-written record: skip */
    }
  }
  return out;
}

/** See QemuMicrovmDriver.killRecorded. */
export async function killRecorded(rec: VmRecord & { alive: boolean }, runRoot: string): Promise<boolean> {
  if (rec.pid !== undefined && rec.alive) {
    try {
      process.kill(rec.pid, 'SIGKILL');
    } catch {
      /* already gone */
    }
    for (let i = 0; i < 100 && pidAlive(rec.pid); i++) await sleep(20);
    if (pidAlive(rec.pid)) return false;
  }
  rmSync(join(runRoot, rec.id), { recursive: true, force: true });
  return true;
}
