/**
 * Spare VMMs: per template, QEMU processes started ahead of demand up to the state load (guest paused, agent
 * socket connected), so a clone that takes one only pays `cont` and the agent handshake. The pool keeps the
 * count topped up in the background; the driver decides which clones may take one.
 */
import { existsSync } from 'node:fs';
import type { Logger } from '../log/logger.js';
import type { Template, VmRecord } from './types.js';
import type { Vm } from './vm.js';

/** Label of a spare VMM's record until a clone takes it (so a restarted daemon can reap it). */
export const SPARE_LABEL = 'sbx.spare';
export const isSpare = (rec: VmRecord): boolean => rec.labels[SPARE_LABEL] === 'true';

export class SparePool {
  /** Loaded, paused spares per template dir, and how many are being started. */
  private readonly byTemplate = new Map<string, { ready: Vm[]; starting: number }>();
  /** Bumped by reset(): a spare that finishes starting under an older epoch is destroyed. */
  private epoch = 0;
  /** Set by close(): no spare starts again (a clone finishing during shutdown must not start one). */
  private closed = false;

  /** `start` launches one spare of a template and loads its state; `size` spares are kept per template. */
  constructor(
    private readonly size: number,
    private readonly start: (template: Template) => Promise<Vm>,
    private readonly log: Logger,
  ) {}

  /** Spares of a template that are loaded and ready to be taken. */
  ready(template: Template): number {
    return this.byTemplate.get(template.dir)?.ready.length ?? 0;
  }

  take(template: Template): Vm | undefined {
    const ready = this.byTemplate.get(template.dir)?.ready;
    while (ready?.length) {
      const vm = ready.shift()!;
      if (vm.state === 'starting' && vm.pid !== undefined) return vm;
      void vm.destroy().catch(() => undefined);
    }
    return undefined;
  }

  /** Start spares of the template in the background until there are `size` of them (ready or starting). */
  refill(template: Template): void {
    if (this.size === 0 || this.closed) return;
    let entry = this.byTemplate.get(template.dir);
    if (!entry) this.byTemplate.set(template.dir, (entry = { ready: [], starting: 0 }));
    const epoch = this.epoch;
    while (entry.ready.length + entry.starting < this.size) {
      entry.starting++;
      const e = entry;
      void this.start(template)
        .then(
          async (vm) => {
            if (epoch !== this.epoch || !existsSync(template.stateFile)) await vm.destroy();
            else e.ready.push(vm);
          },
          (err: unknown) => {
            // A spare destroyed while it started (destroySpares/close) is not a failure worth a warning.
            if (epoch === this.epoch) this.log.warn({ err, template: template.name }, 'spare VMM failed to start');
          },
        )
        .finally(() => e.starting--);
    }
  }

  /** Destroy the ready spares of a template whose files are going away. */
  dropTemplate(template: Template): void {
    for (const vm of this.byTemplate.get(template.dir)?.ready.splice(0) ?? []) void vm.destroy().catch(() => undefined);
    // Those still starting see the state file gone and destroy themselves; nothing of the template stays here.
    this.byTemplate.delete(template.dir);
  }

  /** Forget every spare; those still starting destroy themselves. The caller destroys the VMs it holds. */
  reset(): void {
    this.epoch++;
    this.byTemplate.clear();
  }

  /** No spare starts again. */
  close(): void {
    this.closed = true;
  }
}
