/**
 * The QEMU `-M microvm` driver. Templates are cold-booted once with RAM in a shared file and snapshotted
 * with `x-ignore-shared` (only device state is written); clones map that file copy-on-write
 * (`share=off`) and load the device state, so a clone costs ~tens of ms and only the pages it dirties.
 * Each VM is a `Vm` object (vm.ts, vm-core.ts); the driver creates them, keeps those it manages, and adopts
 * the ones an earlier process left running (run-records.ts).
 */
import { chmodSync, existsSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { SandboxError } from '../errors.js';
import type { Progress } from '../guest/index.js';
import { silentLogger, type Logger } from '../log/logger.js';
import type { VmNetworkPolicy } from './net/policy.js';
import { hostHasHardwareKvm, hostTscKHz, qemuVersion, unprivilegedUser } from './host.js';
import { VmNetworks } from './net/index.js';
import { resolveDriverOptions, type QemuDriverOptions, type ResolvedDriverOptions } from './options.js';
import { adoptQemu, launchQemu, reapOrphanMaterialisers, type QemuProcess } from './process.js';
import { kernelCmdline, qemuArgv, type LaunchPlan } from './qemu-argv.js';
import { killRecorded, newId, readRecords } from './run-records.js';
import { isSpare, SPARE_LABEL, SparePool } from './spares.js';
import { buildTemplate, loadTemplate, templateHash } from './templates.js';
import type { CloneOptions, NetworkLane, Template, TemplateSpec, VmRecord } from './types.js';
import { Vm } from './vm.js';

export class QemuMicrovmDriver {
  readonly options: ResolvedDriverOptions;
  readonly log: Logger;
  private readonly vms = new Map<string, Vm>();
  private readonly spares: SparePool;
  private readonly networks: VmNetworks;
  private tsc: number | undefined;
  private resolvedAccel: 'kvm' | 'tcg' | undefined;
  private qemuVer: string | undefined;

  constructor(opts: QemuDriverOptions & { logger?: Logger } = {}) {
    this.options = resolveDriverOptions(opts);
    this.log = opts.logger ?? silentLogger;
    this.spares = new SparePool(this.options.spareVmms, (t) => this.startSpare(t), this.log);
    this.networks = new VmNetworks(
      {
        cidr: this.options.vmNetworkCidr,
        resolver: this.options.vmResolver,
        slotDir: this.options.vmNetworkSlotDir,
        owner: this.options.runRoot,
        tapUser: this.options.runAs === null ? undefined : (this.options.runAs ?? unprivilegedUser()),
        runMarker: this.options.runMarker,
      },
      this.log,
    );
    mkdirSync(this.options.runRoot, { recursive: true, mode: 0o755 });
    chmodSync(this.options.runRoot, 0o755);
    if (this.options.stateRoot) mkdirSync(this.options.stateRoot, { recursive: true, mode: 0o700 });
  }

  /** @internal Where VM `id` (run dir `runDir`) saves its state when it hibernates (QemuDriverOptions.stateRoot). */
  hibernateFile(id: string, runDir: string): string {
    return this.options.stateRoot ? join(this.options.stateRoot, `${id}.state`) : join(runDir, 'hibernate.state');
  }

  /** Saved states under stateRoot of VMs this run root no longer records (a crash between the two). */
  private sweepStates(): void {
    const root = this.options.stateRoot;
    if (!root) return;
    const known = new Set(this.list().map((r) => r.id));
    for (const f of readdirSync(root))
      if (f.endsWith('.state') && !known.has(f.slice(0, -'.state'.length))) rmSync(join(root, f), { force: true });
  }

  /** QEMU version string (also part of template hashes). */
  qemuVersion(): string {
    this.qemuVer ??= qemuVersion(this.options.qemuBinary);
    return this.qemuVer;
  }

  private tscKHz(): number {
    this.tsc ??= this.options.tscKHz ?? hostTscKHz();
    return this.tsc;
  }

  /** auto: KVM only with VMX/SVM (the probe boot happens in createTemplate), else TCG. */
  private candidateAccels(): ('kvm' | 'tcg')[] {
    if (this.options.accel === 'kvm') return ['kvm'];
    if (this.options.accel === 'tcg') return ['tcg'];
    if (this.resolvedAccel) return [this.resolvedAccel];
    return hostHasHardwareKvm() ? ['kvm', 'tcg'] : ['tcg'];
  }

  kernelCmdline(spec: { image: Template['image']; network: NetworkLane }, accel: 'kvm' | 'tcg'): string {
    return kernelCmdline(spec, accel, () => this.tscKHz());
  }

  /** @internal The full QEMU argv for a plan. */
  buildArgv(plan: LaunchPlan): string[] {
    return qemuArgv(plan, this.options);
  }

  // ---------------------------------------------------------------- templates

  templateHash(spec: TemplateSpec, accel: 'kvm' | 'tcg'): string {
    return templateHash(this, spec, accel);
  }

  /** Cold-boot the template once and snapshot it; cached on disk by content hash. */
  async createTemplate(
    spec: TemplateSpec,
    opts: { progress?: Progress; bootTimeoutMs?: number } = {},
  ): Promise<Template> {
    let lastErr: unknown;
    for (const accel of this.candidateAccels()) {
      try {
        const t = await buildTemplate(this, spec, accel, opts);
        this.resolvedAccel = accel;
        return t;
      } catch (err) {
        lastErr = err;
        if (accel === 'kvm' && this.options.accel === 'auto') {
          this.log.warn({ err }, 'KVM probe boot failed; falling back to TCG');
          continue;
        }
        throw err;
      }
    }
    throw lastErr;
  }

  loadTemplate(dir: string): Template {
    return loadTemplate(dir);
  }

  /** Remove a template's files (clones already running keep their mapping). */
  deleteTemplate(t: Template): void {
    this.spares.dropTemplate(t);
    rmSync(t.dir, { recursive: true, force: true });
  }

  // ---------------------------------------------------------------- clones

  /** Start a VM from a template snapshot; resolves once its agent answers. */
  async clone(template: Template, opts: CloneOptions = {}): Promise<Vm> {
    if (!existsSync(template.memFile) || !existsSync(template.stateFile)) {
      throw new SandboxError('template.missing', `template ${template.name} has no snapshot in ${template.dir}`, {
        hint: 'create the template again (createTemplate)',
      });
    }
    if (opts.id !== undefined && (this.vms.has(opts.id) || existsSync(join(this.options.runRoot, opts.id)))) {
      throw new SandboxError('vm.exists', `a VM with id ${opts.id} already exists`, {
        hint: 'pick another id or destroy the existing VM',
      });
    }
    // A spare has its own id (fixed when QEMU starts).
    const spare = opts.id === undefined ? this.spares.take(template) : undefined;
    // A spare is loaded already and only resumes; a new QEMU first loads the whole state file, which on a host busy
    // booting a pool's refill (TCG) was seen to take over 15 s, so it gets the deadline a restore has.
    const readyTimeoutMs = opts.readyTimeoutMs ?? (spare ? 15_000 : 30_000);
    let vm: Vm;
    let start: () => Promise<void>;
    if (spare) {
      spare.record.labels = opts.labels ?? {};
      vm = spare;
      start = () => spare.runLoaded({ readyTimeoutMs, signal: opts.signal });
    } else {
      const prepared = await this.prepareClone(template, opts.id ?? newId(), opts.labels);
      vm = prepared.vm;
      start = () =>
        prepared.vm.startFromState(prepared.plan, template.stateFile, {
          ignoreShared: true,
          readyTimeoutMs,
          signal: opts.signal,
        });
    }
    try {
      await start();
      return vm;
    } catch (err) {
      await vm.destroy().catch(() => undefined);
      throw err;
    } finally {
      // Replacements start once this clone is up: spawning QEMU blocks the event loop for milliseconds, which
      // would otherwise land on this clone's handshake.
      if (opts.keepSpares !== false) this.spares.refill(template);
    }
  }

  private async prepareClone(
    template: Template,
    id: string,
    labels: Record<string, string> | undefined,
  ): Promise<{ plan: LaunchPlan; vm: Vm }> {
    const runDir = join(this.options.runRoot, id);
    mkdirSync(runDir, { recursive: true });
    const plan: LaunchPlan = {
      id,
      runDir,
      accel: template.accel,
      memoryMiB: template.memoryMiB,
      vcpus: template.vcpus,
      network: template.network,
      image: template.image,
      cmdline: template.cmdline,
      mem: { kind: 'file', path: template.memFile, share: false },
      incoming: true,
    };
    const record: VmRecord = {
      id,
      state: 'starting',
      runDir,
      qmpSocket: join(runDir, 'qmp.sock'),
      agentSocket: join(runDir, 'agent.sock'),
      template: { name: template.name, hash: template.hash, dir: template.dir },
      memoryMiB: template.memoryMiB,
      vcpus: template.vcpus,
      network: template.network,
      accel: template.accel,
      labels: labels ?? {},
      createdAt: new Date().toISOString(),
      argv: [],
    };
    const vm = new Vm(this, record, this.log.child({ vm: id }));
    this.vms.set(id, vm);
    if (template.network === 'egress') {
      // Made before QEMU (it opens the TAP at start) and so before any claim: a warm VM's namespace is ready. The VM
      // is registered first and its destroy waits for this, so a shutdown racing a refill removes the namespace too.
      const creating = this.networks.create(id, undefined).then((ns) => (record.netns = ns));
      vm.networkCreation = creating;
      try {
        plan.netns = (await creating).name;
      } catch (err) {
        this.vms.delete(id);
        rmSync(runDir, { recursive: true, force: true });
        throw err;
      }
      if (vm.state === 'destroyed')
        throw new SandboxError('vm.destroyed', `VM ${id} was destroyed while its network namespace was made`);
    }
    return { plan, vm };
  }

  // ---------------------------------------------------------------- spare VMMs

  /** Spares of a template that are loaded and ready to be taken. */
  readySpares(template: Template): number {
    return this.spares.ready(template);
  }

  private async startSpare(template: Template): Promise<Vm> {
    const { plan, vm } = await this.prepareClone(template, newId(), { [SPARE_LABEL]: 'true' });
    try {
      await vm.loadState(plan, template.stateFile, { ignoreShared: true, readyTimeoutMs: 30_000 });
      return vm;
    } catch (err) {
      await vm.destroy().catch(() => undefined);
      throw err;
    }
  }

  /** Spares a previous process left behind in this run root (it crashed before destroyAll): kill and remove. */
  async reapOrphanSpares(): Promise<number> {
    let n = reapOrphanMaterialisers(this.options.runRoot);
    this.sweepStates();
    for (const rec of this.list()) {
      if (!isSpare(rec) || this.vms.has(rec.id)) continue;
      await this.killRecorded(rec);
      n++;
    }
    await this.sweepNetworks();
    return n;
  }

  /** Remove the network namespaces of VMs of this run root that have no run dir any more (a crash between the two). */
  async sweepNetworks(): Promise<number> {
    return this.networks.sweep((vm) => this.vms.has(vm) || existsSync(join(this.options.runRoot, vm)));
  }

  /** @internal The VM's namespace, made again if it is gone (a node reboot empties /run), with its policy. */
  async ensureNetwork(record: VmRecord): Promise<string | undefined> {
    if (record.network !== 'egress') return undefined;
    if (record.netns && this.networks.exists(record.netns)) return record.netns.name;
    if (record.netns) await this.networks.destroy(record.netns);
    record.netns = await this.networks.create(record.id, record.netPolicy);
    return record.netns.name;
  }

  /** @internal Whether the VM's namespace exists. */
  hasNetwork(record: VmRecord): boolean {
    return !!record.netns && this.networks.exists(record.netns);
  }

  /** @internal Enforce `policy` in the VM's namespace now. */
  async applyNetworkPolicy(record: VmRecord, policy: VmNetworkPolicy | undefined): Promise<void> {
    if (!record.netns) throw new SandboxError('vm.network', `VM ${record.id} has no network namespace`);
    await this.networks.apply(record.netns, policy);
  }

  /** @internal Remove the VM's namespace (after its QEMU is gone). */
  async releaseNetwork(record: VmRecord): Promise<void> {
    if (record.netns) await this.networks.destroy(record.netns);
  }

  /**
   * Kill a VM nothing here manages by the PID in its record (`alive` from list() already checked that the PID was
   * not reused), wait up to 2 s for it to go, then drop its run dir. False when the process outlived the wait (the
   * run dir is kept: removeStale() refuses a live VM).
   */
  async killRecorded(rec: VmRecord & { alive: boolean }): Promise<boolean> {
    const killed = await killRecorded(rec, this.options.runRoot);
    if (killed) await this.releaseNetwork(rec);
    return killed;
  }

  /** @internal */
  forget(id: string): void {
    this.vms.delete(id);
  }

  get(id: string): Vm | undefined {
    return this.vms.get(id);
  }

  /** VMs this driver object manages (spares not included). */
  running(): Vm[] {
    return [...this.vms.values()].filter((vm) => !isSpare(vm.record));
  }

  /** Every VM with a run dir (including ones started by an earlier daemon), with liveness checked. */
  list(): (VmRecord & { alive: boolean })[] {
    return readRecords(this.options.runRoot);
  }

  /** Re-attach to a VM that is still running (e.g. after a daemon restart), or to a hibernated one. */
  async adopt(id: string): Promise<Vm> {
    const existing = this.vms.get(id);
    if (existing) return existing;
    const rec = this.list().find((r) => r.id === id);
    if (!rec)
      throw new SandboxError('vm.not-found', `no VM ${id} under ${this.options.runRoot}`, {
        hint: 'list VMs with `sbx vm list`',
      });
    const { alive, ...record } = rec;
    const vm = new Vm(this, record, this.log.child({ vm: id }));
    if (record.state === 'hibernated') {
      this.vms.set(id, vm);
      return vm;
    }
    if (!alive || record.pid === undefined) {
      throw new SandboxError('vm.gone', `VM ${id} is not running any more (QEMU pid ${record.pid ?? '?'} is gone)`, {
        hint: `destroy it: sbx vm destroy ${id}`,
      });
    }
    this.vms.set(id, vm);
    try {
      await vm.attach(adoptQemu(record.pid));
    } catch (err) {
      this.vms.delete(id);
      throw err;
    }
    return vm;
  }

  /** Remove the run dir of a VM that is not running (stale record). */
  removeStale(id: string): void {
    const rec = this.list().find((r) => r.id === id);
    if (rec?.alive) throw new SandboxError('vm.running', `VM ${id} is running`, { hint: 'destroy it instead' });
    rmSync(join(this.options.runRoot, id), { recursive: true, force: true });
    if (rec) void this.releaseNetwork(rec);
  }

  /** Destroy every VM of this driver, spares included. */
  async destroyAll(): Promise<void> {
    await this.destroySpares();
    await Promise.all([...this.vms.values()].map((vm) => vm.destroy().catch(() => undefined)));
  }

  /** Stop making spares for good and destroy the ones there are; VMs keep running (call before exiting). */
  async close(): Promise<void> {
    this.spares.close();
    await this.destroySpares();
  }

  /** Destroy the spare VMMs (ready and starting) and stop refilling them until the next clone. */
  async destroySpares(): Promise<void> {
    this.spares.reset();
    const spares = [...this.vms.values()].filter((vm) => isSpare(vm.record));
    await Promise.all(spares.map((vm) => vm.destroy().catch(() => undefined)));
  }

  /** @internal */
  launch(plan: LaunchPlan, extraFds: number[] = []): { proc: QemuProcess; argv: string[] } {
    const argv = this.buildArgv(plan);
    const proc = launchQemu(this.options.qemuBinary, argv, {
      logFile: join(plan.runDir, 'qemu.log'),
      extraFds,
      netns: plan.netns,
    });
    return { proc, argv };
  }
}
