/**
 * A microVM: the core (vm-core.ts) plus the operations that save its state. Hibernate writes the full state into
 * the run dir and stops QEMU, restore starts it again from there; checkpoint materialises the running VM into a
 * new template; fork is a checkpoint and n clones of it.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { SandboxError } from '../errors.js';
import { migrateToFile } from './migration.js';
import { imageFromArgv, type LaunchPlan, type MemBackend } from './qemu-argv.js';
import { materialiseTemplate } from './templates.js';
import type { CloneOptions, Template } from './types.js';
import { PhaseClock, VmCore } from './vm-core.js';

/**
 * A fork child's deadline per attempt, and how many attempts. A child loads the memory the checkpoint has just
 * written (80-200 ms here; seconds on a loaded host), but now and then a restored guest never answers at all (seen
 * under a full test run's load: one child silent for 60 s while its siblings answered in 0.2 s): it is destroyed and
 * made again, within the minute callers give a fork.
 */
const FORK_CHILD_ATTEMPT_MS = 15_000;
const FORK_CHILD_ATTEMPTS = 3;
import { unlessExited, withDeadline } from './waits.js';

/**
 * One microVM. Lifecycle operations go through a serial mailbox and the state machine; exec/files go
 * straight to the agent (the agent multiplexes) after a state check.
 */
export class Vm extends VmCore {
  /** Save the full VM state to disk and stop QEMU: the VM's memory is freed. */
  hibernate(): Promise<void> {
    return this.act('hibernate', async () => {
      const qmp = this.requireQmp();
      const proc = this.proc!;
      const file = this.driver.hibernateFile(this.id, this.record.runDir);
      if (this._state === 'running') await this._agent?.sync().catch(() => undefined);
      await qmp.execute('stop');
      await qmp.execute('migrate-set-capabilities', {
        capabilities: [{ capability: 'x-ignore-shared', state: false }],
      });
      await unlessExited(
        proc,
        migrateToFile(qmp, file, this.record.runDir, { what: `hibernate ${this.id}` }),
        'hibernate',
        join(this.record.runDir, 'qemu.log'),
      );
      this.expectingExit = true;
      this._agent?.close();
      this._agent = undefined;
      await qmp.execute('quit').catch(() => undefined);
      qmp.close();
      this.qmp = undefined;
      await withDeadline(
        proc.exited,
        10_000,
        () => new SandboxError('vm.stop-timeout', 'QEMU did not exit after hibernate'),
      ).catch(() => proc.kill());
      this.proc = undefined;
      this.record.pid = undefined;
      this.record.pidStartTicks = undefined;
      this.record.hibernateFile = file;
      for (const s of ['qmp.sock', 'agent.sock']) rmSync(join(this.record.runDir, s), { force: true });
      this.setState('hibernated');
    });
  }

  /** Bring a hibernated VM back (anonymous RAM filled from the saved state). */
  restore(opts: { readyTimeoutMs?: number } = {}): Promise<void> {
    return this.act('restore', async () => {
      const file = this.record.hibernateFile;
      if (!file || !existsSync(file)) {
        throw new SandboxError('vm.state-missing', `hibernated state of VM ${this.id} is missing`, {
          hint: 'the VM cannot be restored; destroy it',
        });
      }
      // The namespace outlives a hibernation, but not a node reboot (/run is a tmpfs): then it is made again.
      await this.driver.ensureNetwork(this.record);
      const plan = this.planFor({ kind: 'ram' });
      try {
        await this.startFromState(plan, file, { ignoreShared: false, readyTimeoutMs: opts.readyTimeoutMs ?? 30_000 });
      } catch (err) {
        this.expectingExit = true;
        this._agent?.close();
        this.qmp?.close();
        await this.proc?.kill();
        this.proc = undefined;
        this._state = 'hibernated';
        throw err;
      }
      rmSync(file, { force: true });
      this.record.hibernateFile = undefined;
      this.persist();
    });
  }

  private planFor(mem: MemBackend): LaunchPlan {
    const tpl = this.templateInfo();
    return {
      id: this.id,
      runDir: this.record.runDir,
      accel: this.record.accel,
      memoryMiB: this.record.memoryMiB,
      vcpus: this.record.vcpus,
      network: this.record.network,
      netns: this.record.netns?.name,
      image: tpl.image,
      cmdline: tpl.cmdline,
      mem,
      incoming: true,
    };
  }

  /** Image and cmdline come from the argv the VM was launched with (its template may be gone). */
  private templateInfo(): { image: Template['image']; cmdline: string } {
    return imageFromArgv(this.record.argv, this.record.template.hash);
  }

  /**
   * Snapshot the running VM into a new template (its RAM and files, including the copy-on-write layer).
   * The VM is paused for the duration of the save, then continues.
   */
  checkpoint(name = `${this.record.template.name}@${this.id}`): Promise<Template> {
    return this.act('checkpoint', async () => {
      const phases = new PhaseClock();
      try {
        const t = await this.checkpointNow(name, phases);
        this.log.info({ template: t.name, phasesMs: phases.done() }, 'checkpoint taken');
        return t;
      } catch (err) {
        this.log.warn({ template: name, phasesMs: phases.done(), err }, 'checkpoint failed');
        throw err;
      }
    });
  }

  private async checkpointNow(name: string, phases = new PhaseClock()): Promise<Template> {
    if (this._state === 'hibernated') {
      // The hibernated state is the full state already: a template is made from it (read only; the VM stays
      // hibernated and restores from the same file), with no QEMU of this VM to pause.
      const file = this.record.hibernateFile;
      if (!file || !existsSync(file))
        throw new SandboxError('vm.state-missing', `hibernated state of VM ${this.id} is missing`);
      const { image, cmdline } = this.templateInfo();
      const t = await materialiseTemplate(this.driver, name, this.record, file, image, cmdline);
      phases.mark('materialise');
      return t;
    }
    const qmp = this.requireQmp();
    const wasRunning = this._state === 'running';
    const file = join(this.record.runDir, `checkpoint-${randomBytes(3).toString('hex')}.state`);
    try {
      if (wasRunning) {
        await this._agent?.sync().catch(() => undefined);
        phases.mark('guestSync');
        await qmp.execute('stop');
      }
      await qmp.execute('migrate-set-capabilities', {
        capabilities: [{ capability: 'x-ignore-shared', state: false }],
      });
      await migrateToFile(qmp, file, this.record.runDir, { what: `checkpoint ${this.id}` });
      phases.mark('save');
      if (wasRunning) {
        await qmp.execute('cont');
        this._agent?.setTime().catch(() => undefined);
      }
      const { image, cmdline } = this.templateInfo();
      const t = await materialiseTemplate(this.driver, name, this.record, file, image, cmdline);
      phases.mark('materialise');
      return t;
    } finally {
      rmSync(file, { force: true });
      if (wasRunning && this.qmp && !this.qmp.closed) {
        const st = await this.qmp.execute<{ status: string }>('query-status').catch(() => undefined);
        if (st && st.status !== 'running') await this.qmp.execute('cont').catch(() => undefined);
      }
    }
  }

  /** Fork n children that start from this VM's current state (files included); the parent keeps running. */
  fork(n: number, opts: Omit<CloneOptions, 'id'> = {}): Promise<Vm[]> {
    if (!Number.isInteger(n) || n < 1 || n > 64) {
      return Promise.reject(
        new SandboxError('vm.invalid-argument', `fork count ${n} must be 1..64`, {
          hint: 'fork fewer children at a time',
        }),
      );
    }
    return this.act('fork', async () => {
      // Where a fork's time goes, at info: under load a fork can take tens of seconds, and this says which part.
      const phases = new PhaseClock();
      const tpl = await this.checkpointNow(`${this.record.template.name}@fork-${this.id}`, phases);
      const children: Vm[] = [];
      try {
        for (let i = 0; i < n; i++) {
          children.push(await this.forkChild(tpl, opts, i));
          phases.mark(`child${i}`);
        }
        this.log.info({ count: n, phasesMs: phases.done() }, 'forked');
        return children;
      } catch (err) {
        this.log.warn({ count: n, made: children.length, phasesMs: phases.done(), err }, 'fork failed');
        await Promise.all(children.map((c) => c.destroy().catch(() => undefined)));
        throw err;
      } finally {
        // Children keep their private mapping of the RAM file; nothing else needs it.
        this.driver.deleteTemplate(tpl);
      }
    });
  }

  private async forkChild(tpl: Template, opts: Omit<CloneOptions, 'id'>, i: number): Promise<Vm> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.driver.clone(tpl, {
          readyTimeoutMs: FORK_CHILD_ATTEMPT_MS,
          keepSpares: false,
          ...opts,
          labels: { ...opts.labels, forkedFrom: this.id },
        });
      } catch (err) {
        // clone() destroyed the silent child; only a guest that did not answer in time is worth another try.
        const code = (err as SandboxError).code;
        if (attempt >= FORK_CHILD_ATTEMPTS || (code !== 'vm.start-timeout' && code !== 'agent.unresponsive')) throw err;
        this.log.warn({ child: i, attempt, err }, 'a fork child did not answer; making it again');
      }
    }
  }

  /** Size of the hibernated state on disk, if hibernated. */
  hibernatedBytes(): number | undefined {
    const f = this.record.hibernateFile;
    return f && existsSync(f) ? statSync(f).size : undefined;
  }
}
