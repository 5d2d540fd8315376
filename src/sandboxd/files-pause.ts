/**
 * The filesystem-only pause (docs/sandboxd-api.md "Filesystem pause"; e2b's `pause({keepMemory: false})`): the
 * sandbox's files are kept, its memory is not. The guest's writable layer (a tmpfs in its RAM, under an overlay of
 * the read-only image) is streamed by its agent to `<dataDir>/layers/<id>.tar` (capped; the node never unpacks it:
 * the guest is hostile), then the VM is destroyed, freeing its RAM and its running slot. The claim stays (same id,
 * token, claimRef, object, lease, network policy), hibernated with `filesOnly`, and on disk. Resume takes a fresh VM
 * of the record's pool key (warm, else a clone), has its agent apply the layer, enforces the record's network policy
 * and points the record at it: the files are back, the processes are not (a reboot, as e2b's is).
 */
import { existsSync, mkdirSync, readdirSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { SandboxError } from '../errors.js';
import { restoreLayer, saveLayer } from '../guest/agent-layer.js';
import type { Logger } from '../log/logger.js';
import type { MicrovmHandle } from '../vmm/index.js';
import type { SandboxRecord } from './claims.js';
import type { PoolKey } from './pool-key.js';

/** What FilesPause needs of the engine (engine.ts wires it). */
export interface FilesPauseHost {
  get(id: string): SandboxRecord | undefined;
  vm(id: string): MicrovmHandle;
  /** Undo a memory pause or hibernation (the layer is read from a running guest). */
  resume(id: string): Promise<void>;
  hasRoom(): boolean;
  /** A running VM of `key` nobody holds: a warm one, else a clone; counted as running while it is made. */
  freshVm(key: PoolKey): Promise<MicrovmHandle>;
  /** The record changed: on disk (awaited) and announced on the change feed. */
  commit(rec: SandboxRecord): Promise<void>;
}

export interface FilesPauseOptions {
  dir: string;
  /** Cap on a saved layer in MiB; 0: the sandbox's memory size (its tmpfs can never legitimately hold more). */
  maxLayerMiB: number;
  log: Logger;
}

export class FilesPause {
  /** One pause or resume at a time per sandbox (a second waits for the first, then finds its result). */
  private readonly busy = new Map<string, Promise<void>>();

  constructor(
    private readonly host: FilesPauseHost,
    private readonly opts: FilesPauseOptions,
  ) {
    mkdirSync(opts.dir, { recursive: true, mode: 0o700 });
  }

  private file(id: string): string {
    return join(this.opts.dir, `${id}.tar`);
  }

  private serial(id: string, run: () => Promise<void>): Promise<void> {
    const next = (this.busy.get(id) ?? Promise.resolve()).catch(() => undefined).then(run);
    this.busy.set(id, next);
    return next.finally(() => {
      if (this.busy.get(id) === next) this.busy.delete(id);
    });
  }

  /** The most bytes a sandbox's saved files may take. */
  capBytes(rec: SandboxRecord, vm: MicrovmHandle): number {
    const mib = this.opts.maxLayerMiB > 0 ? this.opts.maxLayerMiB : (rec.memoryMiB ?? vm.record.memoryMiB);
    return mib * 1024 * 1024;
  }

  /**
   * Save the sandbox's files and destroy its VM. On any failure before the record is on disk (the layer over its
   * cap, a guest without the layer feature, a disk error) nothing changed: the sandbox keeps running.
   */
  pause(rec: SandboxRecord): Promise<void> {
    return this.serial(rec.id, async () => {
      if (rec.filesOnly || this.host.get(rec.id) !== rec) return;
      if (rec.paused || rec.hibernated) await this.host.resume(rec.id);
      const vm = this.host.vm(rec.id);
      const dest = this.file(rec.id);
      const started = Date.now();
      const bytes = await saveLayer(vm.agent, `${dest}.part`, { maxBytes: this.capBytes(rec, vm) });
      if (this.host.get(rec.id) !== rec) {
        rmSync(`${dest}.part`, { force: true }); // released meanwhile
        return;
      }
      renameSync(`${dest}.part`, dest);
      rec.filesOnly = true;
      rec.layerBytes = bytes;
      rec.hibernated = true;
      rec.paused = false;
      delete rec.idleSuspended;
      // On disk before the VM goes: a crash from here on finds the record and its layer, never a lost sandbox.
      await this.host.commit(rec);
      await vm.destroy();
      this.opts.log.info(
        { sandbox: rec.id, vm: vm.id, bytes, ms: Date.now() - started },
        'sandbox paused (filesystem only): files saved, VM destroyed',
      );
    });
  }

  /** Boot the sandbox again from its saved files: a fresh VM of its key, the layer applied, the policy enforced. */
  resume(rec: SandboxRecord): Promise<void> {
    return this.serial(rec.id, async () => {
      if (!rec.filesOnly || this.host.get(rec.id) !== rec) return;
      const src = this.file(rec.id);
      if (!existsSync(src))
        throw new SandboxError(
          'vm.state-missing',
          `the saved files of sandbox ${rec.id} are missing; it cannot resume`,
          {
            hint: 'release the sandbox (its files are gone) and create a new one',
          },
        );
      if (!this.host.hasRoom())
        throw new SandboxError(
          'sandboxd.at-capacity',
          `this node runs its most sandboxes: release or pause one, then resume ${rec.id}`,
        );
      const started = Date.now();
      const vm = await this.host.freshVm(rec.key);
      try {
        await restoreLayer(vm.agent, src);
        if (rec.network) await vm.setNetworkPolicy(rec.network);
      } catch (err) {
        await vm.destroy().catch(() => undefined);
        throw err;
      }
      if (this.host.get(rec.id) !== rec) {
        await vm.destroy(); // released meanwhile
        return;
      }
      rec.vmId = vm.id;
      rec.hibernated = false;
      delete rec.filesOnly;
      delete rec.layerBytes;
      await this.host.commit(rec);
      rmSync(src, { force: true });
      this.opts.log.info(
        { sandbox: rec.id, vm: vm.id, ms: Date.now() - started },
        'sandbox resumed from its saved files (rebooted)',
      );
    });
  }

  /** A released sandbox's saved files go with it. */
  drop(id: string): void {
    rmSync(this.file(id), { force: true });
    rmSync(`${this.file(id)}.part`, { force: true });
  }

  /**
   * At a daemon's start: the records of filesystem-paused sandboxes whose files are on disk (the others are dropped,
   * logged), and no layer file nobody holds (a save cut short, a release while the daemon was down).
   */
  restore(saved: SandboxRecord[]): SandboxRecord[] {
    const kept = saved.filter((rec) => {
      if (existsSync(this.file(rec.id))) return true;
      this.opts.log.warn(
        { sandbox: rec.id },
        'the saved files of a filesystem-paused sandbox are missing; dropping it',
      );
      return false;
    });
    const held = new Set(kept.map((rec) => `${rec.id}.tar`));
    for (const name of readdirSync(this.opts.dir))
      if (!held.has(name)) rmSync(join(this.opts.dir, name), { force: true });
    return kept;
  }
}
