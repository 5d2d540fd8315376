/**
 * A sandbox's resource figures as its guest and its VMM see them (`GET /v1/sandboxes/{id}/metrics`, what the e2b
 * API's getMetrics reports): memory and disk from inside the guest (the agent's `health`: /proc/meminfo and a
 * statfs of /), CPU from the VMM's CPU time — the share of the VM's vCPUs used since the previous reading (or
 * since the VM started, for the first).
 */
import type { NodeEngine, SandboxRecord } from './engine.js';

interface Sample {
  cpuMs: number;
  at: number;
}

const last = new Map<string, Sample>();

export async function vmMetrics(engine: NodeEngine, rec: SandboxRecord) {
  if (rec.filesOnly) return filesOnlyMetrics(rec);
  const vm = engine.vm(rec.id);
  const [stats, health] = await Promise.all([vm.stats(), rec.hibernated ? undefined : vm.agent.health()]);
  const now = Date.now();
  const prev = last.get(vm.id) ?? { cpuMs: 0, at: now - stats.uptimeMs };
  let cpuPct = 0;
  if (stats.cpuMs !== undefined) {
    last.set(vm.id, { cpuMs: stats.cpuMs, at: now });
    const wall = now - prev.at;
    if (wall > 0) cpuPct = Math.min(100, ((stats.cpuMs - prev.cpuMs) / (wall * vm.record.vcpus)) * 100);
  }
  if (last.size > 10_000) last.clear();
  const kib = (n: number | undefined) => (n ?? 0) * 1024;
  return {
    id: rec.id,
    timestamp: new Date(now).toISOString(),
    cpu_count: vm.record.vcpus,
    cpu_used_pct: Math.round(cpuPct * 100) / 100,
    mem_total_bytes: health?.memTotalKiB ? kib(health.memTotalKiB) : vm.record.memoryMiB * 1024 * 1024,
    mem_used_bytes: health ? kib(health.memTotalKiB) - kib(health.memAvailableKiB) : 0,
    mem_cache_bytes: kib(health?.memCachedKiB),
    disk_total_bytes: kib(health?.diskTotalKiB),
    disk_used_bytes: kib(health?.diskTotalKiB) - kib(health?.diskFreeKiB),
    hibernated: rec.hibernated,
  };
}

/**
 * A sandbox paused with its files only has no VM (files-pause.ts): nothing runs, nothing is in memory; its disk is
 * the saved layer, of a writable layer sized as the guest's (half its memory).
 */
function filesOnlyMetrics(rec: SandboxRecord) {
  const mib = (rec.memoryMiB ?? 0) * 1024 * 1024;
  return {
    id: rec.id,
    timestamp: new Date().toISOString(),
    cpu_count: rec.vcpus ?? 0,
    cpu_used_pct: 0,
    mem_total_bytes: mib,
    mem_used_bytes: 0,
    mem_cache_bytes: 0,
    disk_total_bytes: Math.floor(mib / 2),
    disk_used_bytes: rec.layerBytes ?? 0,
    hibernated: true,
  };
}
