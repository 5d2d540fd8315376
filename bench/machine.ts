/**
 * The machine settings a latency figure depends on, printed next to it. On a VM whose idle vCPUs halt at once
 * (`haltpoll` with `guest_halt_poll_ns=0`), every wake-up of a process on the other vCPU is an IPI through the
 * hypervisor: ~0.1 ms per loopback round trip here (PERFORMANCE.md, "What this VM's idle setting costs").
 */
import { readFileSync } from 'node:fs';
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
