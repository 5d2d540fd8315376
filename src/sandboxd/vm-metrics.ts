/**
 * `sandboxd_vm_memory_bytes`: host memory of this node's VMs' QEMU processes (warm and claimed; the paused spare
 * VMMs kept for fast clones are not VMs yet and are left out), read from
 * /proc/<pid>/smaps_rollup. `pss` counts the template pages clones share once (what the node really
 * spends), `rss` counts them in every VM.
 *
 * One reading is a file read per VM, so it is taken at most every 5 s (any scrape more often gets the last one) and
 * 64 VMs at a time: at thousands of VMs a reading on every scrape took a fifth of a node's loop (PERFORMANCE.md
 * "Fleet scale").
 */
import { Gauge, type Registry } from 'prom-client';
import type { NodeEngine } from './engine.js';

const FRESH_MS = 5000;
const AT_ONCE = 64;

interface Reading {
  at: number;
  pss: number;
  rss: number;
}

async function read(engine: NodeEngine): Promise<Reading> {
  const vms = [...engine.driver.running()];
  const bytes = (kib: number | undefined) => (kib !== undefined && Number.isFinite(kib) ? kib * 1024 : 0);
  let pss = 0;
  let rss = 0;
  for (let i = 0; i < vms.length; i += AT_ONCE) {
    const stats = await Promise.all(vms.slice(i, i + AT_ONCE).map((vm) => vm.stats().catch(() => undefined)));
    for (const s of stats) {
      pss += bytes(s?.pssKiB);
      rss += bytes(s?.rssKiB);
    }
  }
  return { at: Date.now(), pss, rss };
}

export function vmMemoryGauge(registry: Registry, engine: NodeEngine): Gauge<'measure'> {
  let last: Reading | undefined;
  let reading: Promise<Reading> | undefined;
  return new Gauge({
    name: 'sandboxd_vm_memory_bytes',
    help: "Host memory of this node's VMs (QEMU processes), by measure (pss: shared template pages counted once; rss); read at most every 5 s",
    labelNames: ['measure'],
    registers: [registry],
    async collect() {
      if (!last || Date.now() - last.at >= FRESH_MS)
        last = await (reading ??= read(engine).finally(() => (reading = undefined)));
      this.set({ measure: 'pss' }, last.pss);
      this.set({ measure: 'rss' }, last.rss);
    },
  });
}
