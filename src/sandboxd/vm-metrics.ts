/**
 * `sandboxd_vm_memory_bytes`: host memory of this node's VMs' QEMU processes (warm and claimed; the paused spare
 * VMMs kept for fast clones are not VMs yet and are left out), read from
 * /proc/<pid>/smaps_rollup on scrape. `pss` counts the template pages clones share once (what the node really
 * spends), `rss` counts them in every VM.
 */
import { Gauge, type Registry } from 'prom-client';
import type { NodeEngine } from './engine.js';

export function vmMemoryGauge(registry: Registry, engine: NodeEngine): Gauge<'measure'> {
  return new Gauge({
    name: 'sandboxd_vm_memory_bytes',
    help: "Host memory of this node's VMs (QEMU processes), by measure (pss: shared template pages counted once; rss)",
    labelNames: ['measure'],
    registers: [registry],
    async collect() {
      let pss = 0;
      let rss = 0;
      for (const vm of engine.driver.running()) {
        const s = await vm.stats().catch(() => undefined);
        const bytes = (kib: number | undefined) => (kib !== undefined && Number.isFinite(kib) ? kib * 1024 : 0);
        pss += bytes(s?.pssKiB);
        rss += bytes(s?.rssKiB);
      }
      this.set({ measure: 'pss' }, pss);
      this.set({ measure: 'rss' }, rss);
    },
  });
}
