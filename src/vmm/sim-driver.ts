/**
 * A SIMULATED VMM driver (`sandboxd --engine=sim`): every "VM" is a record in this process's memory, with no QEMU and
 * no guest behind it. It exists so everything above the VMM (the engine's pools, claims, leases, forks and
 * checkpoints, the node's HTTP API and change feed, NodeInventory, sandbox-apiserver, etcd) can run at fleet sizes
 * this machine cannot boot, and be measured there. A clone takes `cloneMs` (default SIM_CLONE_MS, the real engine's
 * clone time on this machine), so a simulated node refills at a realistic rate per clone slot; the other lifecycle
 * actions take no time but follow the real state machine (types.ts ALLOWED_ACTIONS). Templates and checkpoints are
 * directories with a template.json and two small record files, so a checkpoint survives a daemon restart like a real
 * one; VMs do not (nothing runs to re-adopt: a restarted simulated node has lost its claims, as after a reboot).
 * Anything that needs a guest (exec, files, port-forward) is refused with an error that names the simulation.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { SandboxError } from '../errors.js';
import { silentLogger, type Logger } from '../log/logger.js';
import type { MicrovmDriver, MicrovmHandle, SimulationInfo } from './driver.js';
import { assertNetworked } from './net/index.js';
import { newId } from './run-records.js';
import type { VmNetworkPolicy } from './net/policy.js';
import { loadTemplate } from './templates.js';
import {
  assertAllowed,
  type CloneOptions,
  type Template,
  type TemplateSpec,
  type VmRecord,
  type VmState,
  type VmStats,
} from './types.js';

/**
 * Default clone delay (ms): the real engine's clone time on this machine, measured by bench/scale/clone-time.ts (a
 * real NodeEngine refilling sandbox/minimal from 0 to 30 with the daemon's defaults, refill concurrency 2 and one
 * spare VMM, priming off; every driver.clone() inside the refill timed from call to the clone's agent answering):
 * p50 267 / 286 / 291 ms in three rounds (6.7-7.1 VMs/s per node), under the heavy lock, PERFORMANCE.md "Fleet scale".
 */
export const SIM_CLONE_MS = 280;

/** What every simulated record says about itself. */
export const SIMULATION_NOTE = 'simulated VMM (sandboxd --engine=sim): no VM runs behind this sandbox';

export interface SimDriverOptions {
  /** Where simulated templates and checkpoints are written (record files only). */
  root: string;
  /** How long a clone takes. @default SIM_CLONE_MS */
  cloneMs?: number;
  logger?: Logger;
}

function noGuest(id: string): SandboxError {
  return new SandboxError(
    'vm.simulated',
    `VM ${id} is simulated (sandboxd --engine=sim): it has no guest to run anything in`,
    {
      hint: 'exec, files and port-forward need a node with real microVMs (sandboxd --engine=qemu)',
    },
  );
}

/** One simulated VM: its record and its state, nothing else. */
export class SimulatedVm implements MicrovmHandle {
  private _state: VmState = 'running';
  private readonly startedAt = Date.now();

  constructor(
    private readonly driver: SimulatedMicrovmDriver,
    readonly record: VmRecord,
  ) {}

  get id(): string {
    return this.record.id;
  }

  get state(): VmState {
    return this._state;
  }

  /** No process: nothing runs. */
  get pid(): undefined {
    return undefined;
  }

  get agent(): never {
    assertAllowed(this.id, this._state, 'exec');
    throw noGuest(this.id);
  }

  get files(): never {
    return this.agent;
  }

  exec(): never {
    return this.agent;
  }

  async run(): Promise<never> {
    return this.agent;
  }

  async connectTcp(): Promise<never> {
    return this.agent;
  }

  private move(action: Parameters<typeof assertAllowed>[2], to: VmState): void {
    assertAllowed(this.id, this._state, action);
    this._state = to;
    this.record.state = to;
  }

  async pause(): Promise<void> {
    this.move('pause', 'paused');
  }

  async resume(): Promise<void> {
    this.move('resume', 'running');
  }

  async hibernate(): Promise<void> {
    this.move('hibernate', 'hibernated');
  }

  async restore(): Promise<void> {
    this.move('restore', 'running');
  }

  /** Recorded only: a simulated VM has no namespace to enforce it in. */
  async setNetworkPolicy(policy: VmNetworkPolicy | undefined): Promise<void> {
    assertNetworked(this.record);
    if (policy) this.record.netPolicy = policy;
    else delete this.record.netPolicy;
  }

  async checkpoint(name = `${this.record.template.name}@${this.id}`): Promise<Template> {
    assertAllowed(this.id, this._state, 'checkpoint');
    return this.driver.recordTemplate(name, this.record);
  }

  /** As the real fork: a checkpoint, then `n` clones of it one after another, then the checkpoint goes. */
  async fork(n: number, opts: Omit<CloneOptions, 'id'> = {}): Promise<MicrovmHandle[]> {
    if (!Number.isInteger(n) || n < 1 || n > 64)
      throw new SandboxError('vm.invalid-argument', `fork count ${n} must be 1..64`, {
        hint: 'fork fewer children at a time',
      });
    assertAllowed(this.id, this._state, 'fork');
    const tpl = this.driver.recordTemplate(`${this.record.template.name}@fork-${this.id}`, this.record);
    const children: MicrovmHandle[] = [];
    try {
      for (let i = 0; i < n; i++)
        children.push(await this.driver.clone(tpl, { ...opts, labels: { ...opts.labels, forkedFrom: this.id } }));
      return children;
    } catch (err) {
      await Promise.all(children.map((c) => c.destroy()));
      throw err;
    } finally {
      this.driver.deleteTemplate(tpl);
    }
  }

  async destroy(): Promise<void> {
    if (this._state === 'destroyed') return;
    this._state = 'destroyed';
    this.record.state = 'destroyed';
    this.driver.forget(this.id);
  }

  async stats(): Promise<VmStats> {
    assertAllowed(this.id, this._state, 'stats');
    return { id: this.id, state: this._state, uptimeMs: Date.now() - this.startedAt };
  }
}

export class SimulatedMicrovmDriver implements MicrovmDriver {
  readonly cloneMs: number;
  private readonly vms = new Map<string, SimulatedVm>();
  private readonly templateRoot: string;
  private readonly log: Logger;

  constructor(opts: SimDriverOptions) {
    this.cloneMs = opts.cloneMs ?? SIM_CLONE_MS;
    if (!Number.isFinite(this.cloneMs) || this.cloneMs < 0)
      throw new SandboxError('vm.invalid-argument', `simulated clone time must be >= 0 ms (got ${opts.cloneMs})`);
    this.templateRoot = join(opts.root, 'templates');
    mkdirSync(this.templateRoot, { recursive: true });
    this.log = opts.logger ?? silentLogger;
  }

  get simulation(): SimulationInfo {
    return { note: SIMULATION_NOTE, cloneMs: this.cloneMs };
  }

  /** Simulated VMs this driver holds (warm and claimed). */
  get size(): number {
    return this.vms.size;
  }

  async createTemplate(spec: TemplateSpec): Promise<Template> {
    const memoryMiB = spec.memoryMiB ?? 128;
    const vcpus = spec.vcpus ?? 1;
    const network = spec.network ?? 'none';
    const hash = createHash('sha256')
      .update(JSON.stringify(['sim-template-v1', spec.name, spec.image.hash, memoryMiB, vcpus, network]))
      .digest('hex')
      .slice(0, 16);
    const t = this.writeTemplate(
      { name: spec.name, hash, memoryMiB, vcpus, network, accel: 'tcg', image: spec.image },
      { simulated: SIMULATION_NOTE },
    );
    this.log.info({ template: spec.name, dir: t.dir }, 'simulated template written (no VM was booted)');
    return t;
  }

  /** A template (a checkpoint or a fork's base) recording the VM it was taken of. @internal */
  recordTemplate(name: string, of: VmRecord): Template {
    const { memoryMiB, vcpus, network, accel } = of;
    return this.writeTemplate(
      {
        name,
        hash: `sim-ck-${randomBytes(8).toString('hex')}`,
        memoryMiB,
        vcpus,
        network,
        accel,
        image: { kernel: '', initramfs: '', hash: of.template.hash },
      },
      { simulated: SIMULATION_NOTE, of: { id: of.id, template: of.template, labels: of.labels } },
    );
  }

  /** The template's directory, written like the real driver's, with records where its RAM and device state go. */
  private writeTemplate(
    fields: Pick<Template, 'name' | 'hash' | 'memoryMiB' | 'vcpus' | 'network' | 'accel' | 'image'>,
    record: unknown,
  ): Template {
    const dir = join(this.templateRoot, fields.hash);
    mkdirSync(dir, { recursive: true });
    const saved = { ...fields, cmdline: '', createdAt: new Date().toISOString(), bootMs: 0, simulated: true };
    writeFileSync(join(dir, 'template.json'), JSON.stringify(saved, null, 2));
    const t = loadTemplate(dir);
    writeFileSync(t.memFile, JSON.stringify(record));
    writeFileSync(t.stateFile, JSON.stringify(record));
    return t;
  }

  loadTemplate(dir: string): Template {
    const t = loadTemplate(dir) as Template & { simulated?: boolean };
    if (!t.simulated)
      throw new SandboxError('template.invalid', `${dir} holds a real template; the simulated engine cannot clone it`, {
        hint: 'a node keeps one engine for its data dir: start it with the engine that wrote it',
      });
    return t;
  }

  deleteTemplate(t: Template): void {
    rmSync(t.dir, { recursive: true, force: true });
  }

  async clone(template: Template, opts: CloneOptions = {}): Promise<MicrovmHandle> {
    const id = opts.id ?? newId('sim');
    if (this.vms.has(id))
      throw new SandboxError('vm.exists', `a VM with id ${id} already exists`, {
        hint: 'pick another id or destroy the existing VM',
      });
    // Aborted as the real clone is (its agent handshake takes the signal): agent.aborted.
    if (opts.signal?.aborted) throw new SandboxError('agent.aborted', `clone ${id} aborted`);
    if (this.cloneMs > 0)
      await new Promise<void>((resolve, reject) => {
        const onAbort = () => {
          clearTimeout(t);
          reject(new SandboxError('agent.aborted', `clone ${id} aborted`));
        };
        const t = setTimeout(() => {
          opts.signal?.removeEventListener('abort', onAbort);
          resolve();
        }, this.cloneMs);
        opts.signal?.addEventListener('abort', onAbort, { once: true });
      });
    const vm = new SimulatedVm(this, {
      id,
      state: 'running',
      runDir: '',
      qmpSocket: '',
      agentSocket: '',
      template: { name: template.name, hash: template.hash, dir: template.dir },
      memoryMiB: template.memoryMiB,
      vcpus: template.vcpus,
      network: template.network,
      accel: template.accel,
      labels: { ...opts.labels, simulated: 'true' },
      createdAt: new Date().toISOString(),
      argv: [],
    });
    this.vms.set(id, vm);
    return vm;
  }

  get(id: string): MicrovmHandle | undefined {
    return this.vms.get(id);
  }

  /** Nothing boots: a simulated template's command line is empty, as its createTemplate records it. */
  kernelCmdline(): string {
    return '';
  }

  /** Its VMs have no process: their stats carry no host memory (sandboxd_vm_memory_bytes is 0 on a simulated node). */
  running(): MicrovmHandle[] {
    return [...this.vms.values()];
  }

  /** @internal */
  forget(id: string): void {
    this.vms.delete(id);
  }

  /** No process outlives this one: there is never anything left to re-adopt. */
  list(): (VmRecord & { alive: boolean })[] {
    return [];
  }

  async adopt(id: string): Promise<MicrovmHandle> {
    const vm = this.vms.get(id);
    if (vm) return vm;
    throw new SandboxError('vm.not-found', `no simulated VM ${id} (simulated VMs do not outlive their daemon)`);
  }

  removeStale(): void {}

  async killRecorded(): Promise<boolean> {
    return true;
  }

  async reapOrphanSpares(): Promise<number> {
    return 0;
  }

  async destroyAll(): Promise<void> {
    for (const vm of [...this.vms.values()]) await vm.destroy();
  }

  /** The real close() stops making spare VMMs and leaves VMs running; a simulation has no spares. */
  async close(): Promise<void> {}
}
