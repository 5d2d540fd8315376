/**
 * The core of a microVM (`VmCore`, which `Vm` in vm.ts extends): a serial mailbox over an explicit state machine
 * (types.ts), owning one QEMU process, its QMP connection and its agent connection, and a run dir that `destroy`
 * removes entirely. It starts from a state file (or re-attaches to a running QEMU), pauses, resumes, is destroyed,
 * reports stats, and reaches the agent for exec, files and TCP.
 */
import { closeSync, openSync, readFileSync, rmSync } from 'node:fs';
import type { Socket } from 'node:net';
import { join } from 'node:path';
import type { Duplex } from 'node:stream';
import type { VmNetworkPolicy } from './net/policy.js';
import { SandboxError } from '../errors.js';
import { assertNetworked } from './net/index.js';
import { AgentClient, type AgentFiles, type ExecOptions, type ExecProcess, type ExecResult } from '../guest/index.js';
import type { Logger } from '../log/logger.js';
import { waitIncoming } from './migration.js';
import { pidCpuMs, pidStartTicks, type QemuProcess } from './process.js';
import type { LaunchPlan } from './qemu-argv.js';
import type { QemuMicrovmDriver } from './qemu-driver.js';
import { QmpClient } from './qmp.js';
import { writeRecord } from './run-records.js';
import { assertAllowed, type VmAction, type VmRecord, type VmState, type VmStats } from './types.js';
import { tailOf, unlessExited, withDeadline } from './waits.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Milliseconds spent in each named phase of a start or a save, for the log (where a slow clone's time went). */
export class PhaseClock {
  private last = performance.now();
  private readonly phases: Record<string, number> = {};
  mark(name: string): void {
    const now = performance.now();
    this.phases[name] = Math.round((now - this.last) * 100) / 100;
    this.last = now;
  }
  done(): Record<string, number> {
    return this.phases;
  }
}

/** The part of a Vm (vm.ts) that does not save its state; abstract, only Vm is made. */
export abstract class VmCore {
  protected _state: VmState;
  protected proc: QemuProcess | undefined;
  protected qmp: QmpClient | undefined;
  protected _agent: AgentClient | undefined;
  private mailbox: Promise<unknown> = Promise.resolve();
  private readonly startedAt = Date.now();
  /** Set before QEMU is stopped on purpose, so its exit does not mark the VM failed. */
  protected expectingExit = false;
  /** @internal The VM's network namespace while it is being made (destroy waits for it, then removes it). */
  networkCreation: Promise<unknown> | undefined;
  /** Why the VM failed (QEMU exit status and log tails), once it has. */
  failure: string | undefined;

  constructor(
    protected readonly driver: QemuMicrovmDriver,
    readonly record: VmRecord,
    protected readonly log: Logger,
  ) {
    this._state = record.state;
  }

  get id(): string {
    return this.record.id;
  }

  get state(): VmState {
    return this._state;
  }

  get pid(): number | undefined {
    return this.proc?.alive ? this.proc.pid : undefined;
  }

  get runDir(): string {
    return this.record.runDir;
  }

  /** The agent connection (only while running). */
  get agent(): AgentClient {
    this.check('exec');
    if (!this._agent || this._agent.closed) {
      throw new SandboxError('agent.disconnected', `the agent of VM ${this.id} is not connected`, {
        hint: 'the VM may have crashed; check its stats and destroy it',
      });
    }
    return this._agent;
  }

  get files(): AgentFiles {
    return this.agent.files;
  }

  exec(argv: readonly string[], opts?: ExecOptions): ExecProcess {
    return this.agent.exec(argv, opts);
  }

  async run(argv: readonly string[], opts?: Omit<ExecOptions, 'collect'>): Promise<ExecResult> {
    return this.agent.run(argv, opts);
  }

  async connectTcp(port: number, host?: string): Promise<Duplex> {
    return this.agent.connectTcp(port, host);
  }

  /**
   * Enforce `policy` (undefined = the secure default) on the VM's traffic from now on, in its namespace's kernel;
   * kept in the VM's record, so a restore that has to make the namespace again enforces it too.
   */
  async setNetworkPolicy(policy: VmNetworkPolicy | undefined): Promise<void> {
    assertNetworked(this.record);
    if (this._state === 'destroyed') throw new SandboxError('vm.destroyed', `VM ${this.id} was destroyed`);
    if (this.driver.hasNetwork(this.record)) await this.driver.applyNetworkPolicy(this.record, policy);
    if (policy) this.record.netPolicy = policy;
    else delete this.record.netPolicy;
    this.persist();
  }

  protected setState(s: VmState): void {
    if (this._state === s) return;
    this.log.info({ from: this._state, to: s }, 'vm state');
    this._state = s;
    this.record.state = s;
    this.persist();
  }

  protected persist(): void {
    if (this._state !== 'destroyed') writeRecord(this.record);
  }

  /** A refusal also says why the VM failed, once it has. */
  private check(action: VmAction): void {
    try {
      assertAllowed(this.id, this._state, action);
    } catch (err) {
      if (this.failure && err instanceof SandboxError)
        throw new SandboxError(err.code, `${err.message}: ${this.failure}`, { hint: err.hint });
      throw err;
    }
  }

  /** Serialise lifecycle actions; each is checked against the state machine when it runs. */
  protected act<T>(action: VmAction, fn: () => Promise<T>): Promise<T> {
    const run = async () => {
      this.check(action);
      return fn();
    };
    const p = this.mailbox.then(run, run);
    this.mailbox = p.catch(() => undefined);
    return p;
  }

  private watchExit(proc: QemuProcess): void {
    void proc.exited.then((how) => {
      if (this.proc !== proc || this.expectingExit) return;
      this.failure = `QEMU exited (${how})${tailOf(join(this.record.runDir, 'qemu.log'), 'qemu.log')}${tailOf(join(this.record.runDir, 'console.log'), 'console')}`;
      this.log.warn({ how, failure: this.failure }, 'QEMU exited unexpectedly');
      this._agent?.close();
      this.qmp?.close();
      if (this._state !== 'destroyed' && this._state !== 'hibernated') this.setState('failed');
    });
  }

  /** @internal Launch QEMU with -incoming, load a state file, run, connect the agent. */
  async startFromState(
    plan: LaunchPlan,
    stateFile: string,
    opts: { ignoreShared: boolean; readyTimeoutMs: number; signal?: AbortSignal },
  ): Promise<void> {
    await this.loadState(plan, stateFile, opts);
    await this.runLoaded(opts);
  }

  /** What loadState() left for runLoaded(): the paused VM's runstate and its dialled agent socket. */
  private loaded: { status: string; socket: Socket; phases: PhaseClock } | undefined;

  /**
   * @internal Launch QEMU with -incoming and load a state file. The guest stays paused (it has run no
   * instruction yet) with the agent socket already connected; runLoaded() lets it run.
   */
  async loadState(
    plan: LaunchPlan,
    stateFile: string,
    opts: { ignoreShared: boolean; readyTimeoutMs: number; signal?: AbortSignal },
  ): Promise<void> {
    if (this._state === 'destroyed') throw new SandboxError('vm.destroyed', `VM ${this.id} was destroyed`);
    const logFile = join(plan.runDir, 'qemu.log');
    const fd = openSync(stateFile, 'r');
    let launched: { proc: QemuProcess; argv: string[] };
    try {
      launched = this.driver.launch(plan, [fd]);
    } finally {
      closeSync(fd);
    }
    const { proc, argv } = launched;
    const phases = new PhaseClock();
    this.proc = proc;
    this.expectingExit = false;
    this.record.argv = argv;
    this.record.pid = proc.pid;
    this.record.pidStartTicks = pidStartTicks(proc.pid);
    this.persist();
    this.watchExit(proc);
    const deadline = Date.now() + opts.readyTimeoutMs;
    const timeoutErr = () =>
      new SandboxError('vm.start-timeout', `VM ${this.id} was not ready within ${opts.readyTimeoutMs} ms`, {
        hint: 'the host may be overloaded; see qemu.log and console.log in the run dir',
      });
    await this.explainExit(proc, async () => {
      const qmp = await unlessExited(
        proc,
        withDeadline(
          QmpClient.connect(this.record.qmpSocket, { timeoutMs: opts.readyTimeoutMs }),
          opts.readyTimeoutMs,
          timeoutErr,
        ),
        'start',
        logFile,
      );
      this.qmp = qmp;
      phases.mark('qmp');
      // Dial the agent while the state loads, so the restored guest finds its host connected.
      const socketP = AgentClient.dial(this.record.agentSocket, {
        connectTimeoutMs: Math.max(100, deadline - Date.now()),
        signal: opts.signal,
      });
      socketP.catch(() => undefined);
      try {
        if (opts.ignoreShared)
          await qmp.execute('migrate-set-capabilities', {
            capabilities: [{ capability: 'x-ignore-shared', state: true }],
          });
        await qmp.execute('migrate-incoming', { uri: 'fd:3' });
        const status = await unlessExited(
          proc,
          waitIncoming(qmp, Math.max(100, deadline - Date.now())),
          'state load',
          logFile,
        );
        const socket = await unlessExited(proc, socketP, 'agent connect', logFile);
        phases.mark('load');
        this.loaded = { status, socket, phases };
      } catch (err) {
        void socketP.then(
          (s) => s.destroy(),
          () => undefined,
        );
        throw err;
      }
    });
  }

  /** @internal Let a VM from loadState() run and complete the agent handshake. */
  async runLoaded(opts: { readyTimeoutMs: number; signal?: AbortSignal }): Promise<void> {
    const loaded = this.loaded;
    const proc = this.proc;
    if (!loaded || !proc || !this.qmp) throw new SandboxError('vm.not-loaded', `VM ${this.id} has no loaded state`);
    this.loaded = undefined;
    const { phases } = loaded;
    phases.mark('idle');
    const logFile = join(this.record.runDir, 'qemu.log');
    await this.explainExit(proc, async () => {
      // The handshake is written right after `cont` is sent, not after QEMU confirms it (1-8 ms here): the guest
      // finds the HELLO waiting as soon as it runs. The answer cannot come before the guest runs anyway.
      const contP = loaded.status !== 'running' ? this.requireQmp().execute('cont') : Promise.resolve();
      const agentP = AgentClient.handshake(loaded.socket, this.record.agentSocket, {
        connectTimeoutMs: opts.readyTimeoutMs,
        signal: opts.signal,
        logger: this.log,
      });
      agentP.catch(() => undefined);
      try {
        await contP;
        phases.mark('cont');
        this._agent = await unlessExited(proc, agentP, 'agent connect', logFile);
        phases.mark('agent');
      } catch (err) {
        loaded.socket.destroy();
        void agentP.then(
          (a) => a.close(),
          () => undefined,
        );
        throw err;
      }
    });
    this.log.debug({ phasesMs: phases.done() }, 'vm started');
    this.setState('running');
  }

  /** A QEMU that died mid-way surfaces first as a broken socket; report the exit and its log instead. */
  private async explainExit(proc: QemuProcess, fn: () => Promise<void>): Promise<void> {
    try {
      await fn();
    } catch (err) {
      const how = await Promise.race([proc.exited, sleep(300).then(() => undefined)]);
      if (how !== undefined && !(err instanceof SandboxError && err.code === 'vm.process-exited')) {
        const logFile = join(this.record.runDir, 'qemu.log');
        throw new SandboxError(
          'vm.process-exited',
          `QEMU exited (${how}) while starting VM ${this.id}${tailOf(logFile, 'qemu.log')}`,
          {
            cause: err,
            hint: `see ${logFile}; a crash here usually means a bad or mismatched snapshot`,
          },
        );
      }
      throw err;
    }
  }

  /** @internal Re-attach to a running QEMU (daemon restart). */
  async attach(proc: QemuProcess): Promise<void> {
    this.proc = proc;
    this.watchExit(proc);
    this.qmp = await QmpClient.connect(this.record.qmpSocket, { timeoutMs: 5_000 });
    const st = await this.qmp.execute<{ status: string }>('query-status');
    if (st.status === 'running') {
      this._agent = await AgentClient.connect(this.record.agentSocket, { connectTimeoutMs: 5_000, logger: this.log });
      this._state = 'running';
    } else if (st.status === 'paused') {
      this._state = 'paused';
    } else {
      this._state = 'failed';
    }
    this.record.state = this._state;
    this.persist();
  }

  protected requireQmp(): QmpClient {
    if (!this.qmp || this.qmp.closed) {
      throw new SandboxError('vm.process-exited', `QEMU of VM ${this.id} is not reachable`, {
        hint: 'the VM crashed; destroy it',
      });
    }
    return this.qmp;
  }

  /** QMP stop: the guest is frozen (its agent stops answering) until resume. */
  pause(): Promise<void> {
    return this.act('pause', async () => {
      await this.requireQmp().execute('stop');
      this.setState('paused');
    });
  }

  resume(): Promise<void> {
    return this.act('resume', async () => {
      await this.requireQmp().execute('cont');
      this.setState('running');
      // The guest clock stood still while paused; fix it without delaying the caller.
      this._agent?.setTime().catch(() => undefined);
    });
  }

  /** Kill QEMU and remove everything of the VM (process, sockets, files). Idempotent. */
  destroy(): Promise<void> {
    if (this._state === 'destroyed') return Promise.resolve();
    const run = async () => {
      if (this._state === 'destroyed') return;
      this.expectingExit = true;
      this._agent?.close();
      this.loaded?.socket.destroy();
      this.qmp?.close();
      await this.proc?.kill();
      this._state = 'destroyed';
      this.record.state = 'destroyed';
      rmSync(this.record.runDir, { recursive: true, force: true });
      if (this.record.hibernateFile) rmSync(this.record.hibernateFile, { force: true });
      await this.networkCreation?.catch(() => undefined);
      await this.driver.releaseNetwork(this.record);
      this.driver.forget(this.id);
    };
    // destroy must not wait behind a hung lifecycle action: kill first, then drain the mailbox.
    const p = run();
    this.mailbox = this.mailbox.then(
      () => p,
      () => p,
    );
    return p;
  }

  async stats(): Promise<VmStats> {
    assertAllowed(this.id, this._state, 'stats');
    const s: VmStats = { id: this.id, state: this._state, uptimeMs: Date.now() - this.startedAt };
    const pid = this.pid;
    if (pid === undefined) return s;
    s.pid = pid;
    try {
      const roll = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
      const kib = (k: string) => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm').exec(roll)?.[1] ?? NaN);
      s.rssKiB = kib('Rss');
      s.pssKiB = kib('Pss');
      s.privateDirtyKiB = kib('Private_Dirty');
      s.cpuMs = pidCpuMs(pid);
    } catch {
      /* exited meanwhile */
    }
    return s;
  }
}
