import { MAX_FORK_COUNT } from '../api/index.js';
import type { VmNetworkPolicy } from '../api/vm-network.js';
import { EventEmitter } from 'node:events';
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { SandboxError } from '../errors.js';
import { silentLogger, type Logger } from '../log/logger.js';
import { QemuMicrovmDriver, type MicrovmDriver, type MicrovmHandle, type Template } from '../vmm/index.js';
import {
  Checkpoints,
  DEFAULT_CHECKPOINT_TTL_HOURS,
  DEFAULT_MAX_CHECKPOINTS,
  DEFAULT_MAX_CHECKPOINTS_PER_NAMESPACE,
  type CheckpointRecord,
} from './checkpoints.js';
import { ClaimRecords, type ClaimOptions, type ExpiryAction, type SandboxRecord } from './claims.js';
import { assertPolicyFits } from './network-policy.js';
import { keyString, type PoolKey } from './pool-key.js';
import { PromotedTemplates, type PromotedTemplate } from './promoted.js';
import { EngineStateFile } from './engine-state.js';
import { DEFAULT_IDLE_CPU_PERCENT, IdleSuspender } from './idle.js';
import { HibernationRecords } from './hibernation-records.js';
import {
  defaultRunRoot,
  DEFAULT_MAX_SUSPENDED,
  uniqueRefs,
  type ClaimAdmission,
  type ClaimRequest,
  type EngineOptions,
  type ForkChild,
} from './engine-options.js';
import { FilesPause } from './files-pause.js';
import { LABEL_NODE, WarmPools, type PoolStatus } from './warm-pools.js';

export {
  DEFAULT_CHECKPOINT_TTL_HOURS,
  DEFAULT_MAX_CHECKPOINTS,
  DEFAULT_MAX_CHECKPOINTS_PER_NAMESPACE,
  DEFAULT_MAX_SUSPENDED,
  defaultRunRoot,
  MAX_FORK_COUNT,
  type ClaimAdmission,
  type ClaimRequest,
  type EngineOptions,
  type ForkChild,
} from './engine-options.js';
export type { CheckpointRecord } from './checkpoints.js';
export type { SandboxRecord } from './claims.js';
export type { PoolStatus } from './warm-pools.js';

/**
 * The node's microVM engine: warm pools per key refilled by copy-on-write clones in the background, claims that
 * pop a running VM from memory (no boot and no I/O on the claim path), leases with deadlines, and state that
 * survives a daemon restart (VMs keep running; claims are re-read from disk and re-attached).
 */

export class NodeEngine extends EventEmitter {
  readonly driver: MicrovmDriver;
  readonly runRoot: string;
  private readonly pools: WarmPools;
  private readonly claims: ClaimRecords;
  /** Hibernations published for a resume elsewhere (hibernation-records.ts). */
  private readonly hibernationRecords: HibernationRecords;
  /** Idle policies: suspends idle sandboxes, wakes them for the next request (idle.ts). */
  readonly idle: IdleSuspender;
  /** Filesystem-only pauses: saved files, no VM (files-pause.ts). */
  private readonly filesPause: FilesPause;
  private readonly checkpoints: Checkpoints;
  private readonly promoted: PromotedTemplates;
  private readonly state: EngineStateFile;
  private readonly log: Logger;
  private readonly opts: Required<
    Omit<EngineOptions, 'driver' | 'logger' | 'runRoot' | 'vmNetworkCidr' | 'vmResolver'>
  >;
  private reaper: NodeJS.Timeout | undefined;
  private reaping = false;
  /** Claims whose VM is still being cloned; they count against maxClaims like the ones in the table. */
  private pending = 0;
  /** The policy change in flight per sandbox (setNetworkPolicy runs them one after another). */
  private readonly policyChanges = new Map<string, Promise<SandboxRecord>>();
  /** Set while the node drains (drain.ts): new claims and wakes are refused. */
  private admission: ClaimAdmission | undefined;
  readonly counters = {
    claims: 0,
    warmHits: 0,
    provisioned: 0,
    releases: 0,
    reaps: 0,
    forks: 0,
    /** Lease-end actions (on_expiry) that failed; each ended in a release. */
    expiryFailures: 0,
  };

  constructor(opts: EngineOptions) {
    super();
    this.opts = {
      dataDir: opts.dataDir,
      nodeName: opts.nodeName,
      advertiseAddr: opts.advertiseAddr,
      maxClaims: opts.maxClaims ?? 200,
      maxSuspended: opts.maxSuspended ?? DEFAULT_MAX_SUSPENDED,
      maxLayerMiB: opts.maxLayerMiB ?? 0,
      idleCpuPercent: opts.idleCpuPercent ?? DEFAULT_IDLE_CPU_PERCENT,
      portableHibernation: opts.portableHibernation ?? false,
      refillConcurrency: opts.refillConcurrency ?? 2,
      refillDelayMs: opts.refillDelayMs ?? 25,
      spareVmms: opts.spareVmms ?? 1,
      primeWarmVms: opts.primeWarmVms ?? true,
      defaultTtlSeconds: opts.defaultTtlSeconds ?? 300,
      maxTtlSeconds: opts.maxTtlSeconds ?? 86_400,
      checkpointTtlMs: opts.checkpointTtlMs ?? DEFAULT_CHECKPOINT_TTL_HOURS * 3_600_000,
      maxCheckpoints: opts.maxCheckpoints ?? DEFAULT_MAX_CHECKPOINTS,
      maxCheckpointsPerNamespace: opts.maxCheckpointsPerNamespace ?? DEFAULT_MAX_CHECKPOINTS_PER_NAMESPACE,
      fsync: opts.fsync ?? true,
    };
    this.log = opts.logger ?? silentLogger;
    mkdirSync(this.opts.dataDir, { recursive: true });
    this.runRoot = opts.runRoot ?? defaultRunRoot(this.opts.dataDir);
    this.driver =
      opts.driver ??
      new QemuMicrovmDriver({
        runRoot: this.runRoot,
        // Hibernated VMs' RAM goes to the data dir's disk: the run root is under /run, often a tmpfs.
        stateRoot: join(this.opts.dataDir, 'hibernated'),
        logger: this.log,
        spareVmms: this.opts.spareVmms,
        vmNetworkCidr: opts.vmNetworkCidr,
        vmResolver: opts.vmResolver,
      });
    this.promoted = new PromotedTemplates(this.driver, join(this.opts.dataDir, 'templates'), this.log);
    this.pools = new WarmPools({
      local: this.promoted,
      driver: this.driver,
      nodeName: this.opts.nodeName,
      log: this.log,
      refillConcurrency: this.opts.refillConcurrency,
      refillDelayMs: this.opts.refillDelayMs,
      primeWarmVms: this.opts.primeWarmVms,
      onWarm: (key) => {
        this.emit('warm', key);
        this.emit('pools');
      },
    });
    this.claims = new ClaimRecords(this.opts);
    this.idle = new IdleSuspender(this, { cpuPercent: this.opts.idleCpuPercent, logger: this.log });
    this.filesPause = new FilesPause(
      {
        get: (id) => this.claims.get(id),
        vm: (id) => this.vm(id),
        resume: (id) => this.resume(id),
        hasRoom: () => this.hasRoom(),
        freshVm: (key) =>
          this.reserving(1, async () => {
            const vm = this.pools.take(key) ?? (await this.pools.provision(key));
            this.pools.refillSoon(key);
            this.emit('pools');
            return vm;
          }),
        commit: async (rec) => {
          this.claims.touch(rec);
          await this.state.commit();
          this.emit('changed', rec);
        },
      },
      { dir: join(this.opts.dataDir, 'layers'), maxLayerMiB: this.opts.maxLayerMiB, log: this.log },
    );
    this.checkpoints = new Checkpoints(this.driver, join(this.opts.dataDir, 'checkpoints'), this.log);
    this.hibernationRecords = new HibernationRecords(
      {
        get: (id) => this.claims.get(id),
        vm: (id) => this.vm(id),
        checkpoints: this.checkpoints,
        changed: (rec) => this.changed(rec),
        flush: () => this.state.flush(),
        schedule: () => this.state.schedule(),
        emit: (event: string, arg: unknown) => this.emit(event, arg),
      },
      this.log,
    );
    this.state = new EngineStateFile(
      join(this.opts.dataDir, 'state.json'),
      {
        claims: () => this.claims.all(),
        rest: () => ({
          node: this.opts.nodeName,
          targets: this.pools.targets(),
          checkpoints: this.checkpoints.list(),
          promoted: this.promoted.list(),
        }),
      },
      this.log,
      { fsync: this.opts.fsync },
    );
  }

  get nodeName(): string {
    return this.opts.nodeName;
  }

  get advertiseAddr(): string {
    return this.opts.advertiseAddr;
  }

  /** Set once the API has bound, when the address to advertise was not given (a `--listen` port of 0). */
  set advertiseAddr(addr: string) {
    this.opts.advertiseAddr = addr;
  }

  /** Re-attach to VMs a previous daemon left running; reap the ones nothing accounts for. */
  async start(): Promise<{ adopted: number; reaped: number }> {
    const saved = this.state.read();
    let adopted = 0;
    let reaped = await this.driver.reapOrphanSpares();
    for (const rec of this.driver.list()) {
      if (rec.labels[LABEL_NODE] !== this.opts.nodeName) continue;
      // A files-only pause's VM that a crash left running (the record was on disk first): destroyed below.
      const claim = saved.claims.find((c) => c.vmId === rec.id && !c.filesOnly);
      if (!rec.alive && rec.state !== 'hibernated') {
        this.driver.removeStale(rec.id);
        if (claim)
          this.log.warn({ sandbox: claim.id }, 'claimed VM died while the daemon was down; dropping the claim');
        continue;
      }
      try {
        const vm = await this.driver.adopt(rec.id);
        if (claim) {
          this.claims.restore(claim);
          adopted++;
        } else {
          // Not a recorded claim. It may be a warm VM, or one taken for a claim whose write a crash cut short: never
          // answered (a claim is answered once it is on disk, commit()), but a VM a claim popped is never handed
          // out again: destroy it; the pool refills from the template.
          await vm.destroy();
          reaped++;
        }
      } catch (err) {
        // Its QEMU may still run (e.g. a hung agent): kill it by its recorded PID and drop the run dir. Retrying
        // adopt() would fail the same way, and removeStale() refuses a live VM, which used to fail the whole start.
        this.log.warn({ err, vm: rec.id }, 'could not re-adopt a VM; killing it');
        await this.driver.killRecorded(rec);
        reaped++;
      }
    }
    for (const claim of this.filesPause.restore(saved.claims.filter((c) => c.filesOnly))) {
      this.claims.restore(claim);
      adopted++;
    }
    const checkpoints = this.checkpoints.restore(saved.checkpoints);
    const promoted = this.promoted.restore(saved.promoted);
    for (const target of saved.targets) this.pools.ensurePool(target.key, target.warm, target.owner);
    this.reaper = setInterval(() => {
      void this.reapExpired();
      void this.idle.sweep();
    }, 1000);
    this.reaper.unref();
    this.state.schedule();
    this.pools.refillAll();
    this.log.info({ adopted, reaped, claims: this.claims.size, checkpoints }, 'engine started');
    if (promoted) this.log.info({ promoted }, 'promoted templates restored');
    return { adopted, reaped };
  }

  async close(opts: { destroyVms: boolean }): Promise<void> {
    this.pools.close();
    if (this.reaper) clearInterval(this.reaper);
    await this.state.flush();
    await this.driver.close();
    if (opts.destroyVms) {
      await this.driver.destroyAll();
      this.claims.clear();
      this.pools.forgetWarm();
      // Only this engine's VMs live here, and all are gone now.
      rmSync(this.runRoot, { recursive: true, force: true });
    }
    await this.state.close();
  }

  // ------------------------------------------------------------------ templates and pools

  knownTemplates(): string[] {
    return this.pools.knownTemplates();
  }

  assertKnownTemplate(template: string): void {
    this.pools.assertKnownTemplate(template);
  }

  /** The snapshot every clone of this key starts from (built once, cached on disk by content hash). */
  template(key: PoolKey): Promise<Template> {
    return this.pools.template(key);
  }

  /** Build the named template without a pool (e.g. at startup, to make the first claim fast). */
  async prepare(key: PoolKey): Promise<void> {
    await this.pools.template(key);
  }

  /** Replace this node's warm targets wholesale; pools left out are drained (claims are never touched). */
  setTargets(targets: Array<{ key: PoolKey; warm: number }>, owner?: string): void {
    this.pools.setTargets(targets, owner);
    this.state.schedule();
    this.emit('pools');
  }

  poolStatus(): PoolStatus[] {
    return this.pools.status();
  }

  poolErrors(): Array<{ key: PoolKey; error: string }> {
    return this.pools.errors();
  }

  warmCount(key: PoolKey): number {
    return this.pools.warmCount(key);
  }

  // ------------------------------------------------------------------ claims

  get claimedCount(): number {
    return this.claims.size;
  }

  get maxClaims(): number {
    return this.opts.maxClaims;
  }

  /**
   * Refuse new claims (claim, fork, checkpoint claim: every path, every listener) and wakes while `gate` is set: a
   * drain (drain.ts). Undefined admits them again. The change feed and NodeInventory say the node is draining.
   */
  setAdmission(gate: ClaimAdmission | undefined): void {
    this.admission = gate;
    // A draining node keeps no warm VM (it hands none out): released now, refilled once it is undrained.
    if (gate) {
      const released = this.pools.suspend();
      if (released) this.log.info({ released }, 'draining: warm VMs released, refills stopped');
    } else this.pools.resume();
    this.emit('pools');
  }

  /** The drain in force, if any (its summary goes to the change feed and NodeInventory). */
  get draining(): ClaimAdmission | undefined {
    return this.admission;
  }

  /** Claims whose VM is being made (a clone, a fork, a checkpoint's clone) or woken: a drain waits for them. */
  get claimsInFlight(): number {
    return this.pending;
  }

  /** Whether `n` more claims fit under maxClaims, counting the ones still being cloned. */
  /**
   * Whether `n` more sandboxes may run: running claims (hibernated ones hold no VM) plus those being made, within
   * `maxClaims`; and all claims within `maxClaims + maxSuspended`.
   */
  hasRoom(n = 1): boolean {
    const total = this.claims.size + this.pending + n;
    return (
      total - this.hibernatedCount() <= this.opts.maxClaims && total <= this.opts.maxClaims + this.opts.maxSuspended
    );
  }

  private hibernatedCount(): number {
    let n = 0;
    for (const rec of this.claims.all()) if (rec.hibernated) n++;
    return n;
  }

  /** Hold `n` claim slots while `make` runs (a clone takes tens of ms, and other claims arrive meanwhile). */
  private async reserving<T>(n: number, make: () => Promise<T>): Promise<T> {
    this.pending += n;
    try {
      return await make();
    } finally {
      this.pending -= n;
    }
  }

  /**
   * Hand over a running VM. Warm hit: pop from memory, answer once the claim is on disk (the refill happens after).
   * Miss: clone one now (tens of ms) unless `provisionOnMiss` is false.
   */
  async claim(req: ClaimRequest): Promise<SandboxRecord> {
    const warm = this.claimWarm(req);
    // Without a policy no await is added: the default is what a warm VM enforces already.
    if (warm) return this.durable(warm.network ? await this.enforced(warm) : warm);
    this.assertKnownTemplate(req.key.template);
    if (req.provisionOnMiss === false)
      throw new SandboxError('sandboxd.warm-miss', `no warm sandbox for ${keyString(req.key)}`);
    // The ref is held from here (this tick, before the clone's await) until the record holds it.
    const unreserve = this.claims.reserveRefs(uniqueRefs(req));
    try {
      const vm = await this.reserving(1, () => this.pools.provision(req.key));
      this.counters.provisioned++;
      if (req.primeAfter) this.pools.primeLater(vm);
      const record = this.record(vm, req.key, 'provisioned', req);
      this.pools.refillSoon(req.key);
      return await this.durable(await this.enforced(record));
    } finally {
      unreserve();
    }
  }

  /**
   * The warm half of claim(): a record for a VM popped from the pool, or undefined when the pool has none (then
   * claim() provisions). Not on disk yet: private, so nothing answers with it before durable().
   */
  private claimWarm(req: ClaimRequest): SandboxRecord | undefined {
    this.admission?.assertClaim();
    if (!this.hasRoom())
      throw new SandboxError(
        'sandboxd.at-capacity',
        `node ${this.opts.nodeName} is at capacity (${this.opts.maxClaims} claims)`,
      );
    for (const ref of uniqueRefs(req)) this.claims.assertRefFree(ref);
    assertPolicyFits(req.key, req.network);
    const vm = this.pools.take(req.key);
    if (!vm) return undefined;
    this.counters.warmHits++;
    const rec = this.record(vm, req.key, 'warm', req);
    this.emit('pools');
    return rec;
  }

  /**
   * `claims`, once on disk: what every claim path (claim, fork, claimCheckpoint) answers with. The records are in the
   * table (and the change feed) from record() on, but nobody holds their VMs until this resolves, so a crash before
   * it loses nothing anyone was given (engine-state.ts, group commit). When the write fails they are released (their
   * VMs destroyed) and the caller gets a 503: a claim nobody could find after a restart is never answered.
   */
  private async durable<T extends SandboxRecord | SandboxRecord[]>(claims: T): Promise<T> {
    try {
      await this.state.commit();
      return claims;
    } catch (err) {
      for (const rec of Array.isArray(claims) ? claims : [claims])
        if (this.claims.get(rec.id) === rec)
          await this.release(rec.id).catch((e: unknown) => this.log.warn({ err: e, sandbox: rec.id }, 'undo failed'));
      // The cause (a host path, an errno) goes to the log (EngineStateFile), not to the client.
      throw new SandboxError(
        'sandboxd.state-write',
        'the node could not record the claim on its disk; nothing was claimed',
        {
          cause: err,
          hint: "retry; if it persists, the node's disk needs attention (its log names the error)",
        },
      );
    }
  }

  /**
   * `claims` once their VMs enforce the policy each record carries (SandboxRecord.network; none: nothing to do). Like
   * durable(), all or nothing: when one VM refuses its policy every record is released (their VMs destroyed), so no
   * VM is ever handed out with less filtering than was asked for.
   */
  private async enforced<T extends SandboxRecord | SandboxRecord[]>(claims: T): Promise<T> {
    const recs: SandboxRecord[] = Array.isArray(claims) ? claims : [claims];
    try {
      await Promise.all(recs.map((r) => (r.network ? this.vm(r.id).setNetworkPolicy(r.network) : undefined)));
      return claims;
    } catch (err) {
      for (const rec of recs)
        if (this.claims.get(rec.id) === rec)
          await this.release(rec.id).catch((e: unknown) => this.log.warn({ err: e, sandbox: rec.id }, 'undo failed'));
      throw err;
    }
  }

  /**
   * Change a sandbox's egress policy live: `update` gets the current one and returns the next (undefined: the secure
   * default). One change at a time per sandbox, so the record always says what its VM was last told to enforce.
   */
  async setNetworkPolicy(
    id: string,
    update: (current: VmNetworkPolicy | undefined) => VmNetworkPolicy | undefined,
  ): Promise<SandboxRecord> {
    const prev = this.policyChanges.get(id) ?? Promise.resolve();
    const next = prev
      .catch(() => undefined)
      .then(async () => {
        const rec = this.mustGet(id);
        const policy = update(rec.network);
        if (rec.key.net !== 'egress')
          throw new SandboxError(
            'sandboxd.bad-request',
            `network rules need net=egress (sandbox ${id} is net=${rec.key.net}: it has no network to filter)`,
          );
        await this.vm(id).setNetworkPolicy(policy);
        if (this.claims.get(id) !== rec) return rec; // released meanwhile: nothing left to record
        if (policy) rec.network = policy;
        else delete rec.network;
        this.changed(rec);
        return rec;
      });
    this.policyChanges.set(id, next);
    try {
      return await next;
    } finally {
      if (this.policyChanges.get(id) === next) this.policyChanges.delete(id);
    }
  }

  private record(vm: MicrovmHandle, key: PoolKey, source: SandboxRecord['source'], opts: ClaimOptions): SandboxRecord {
    const rec = this.claims.add(vm.id, key, source, {
      ...opts,
      vcpus: vm.record.vcpus,
      memoryMiB: vm.record.memoryMiB,
    });
    this.counters.claims++;
    this.state.schedule();
    this.emit('claimed', rec);
    return rec;
  }

  get(id: string): SandboxRecord | undefined {
    return this.claims.get(id);
  }

  byRef(claimRef: string): SandboxRecord | undefined {
    return this.claims.byRef(claimRef);
  }

  /** 409 (sandboxd.conflict) if `claimRef` is a live claim's or one being made (a clone or fork in flight). */
  assertClaimRefFree(claimRef: string): void {
    this.claims.assertRefFree(claimRef);
  }

  /** The version of the latest change to the claim table (the change feed's snapshot version). */
  get changeCounter(): number {
    return this.claims.changeCounter;
  }

  /** Claims, all of them or those with this claimRef and/or made by this tenant. */
  list(filter: { claimRef?: string; tenant?: string } = {}): SandboxRecord[] {
    const { claimRef, tenant } = filter;
    return this.claims
      .all()
      .filter(
        (c) => (claimRef === undefined || c.claimRef === claimRef) && (tenant === undefined || c.tenant === tenant),
      );
  }

  /** Whether the VM of claim `id` has run its first command (EngineOptions.primeWarmVms). */
  isPrimed(id: string): boolean {
    return this.pools.isPrimed(this.vm(id));
  }

  vm(id: string): MicrovmHandle {
    const rec = this.mustGet(id);
    if (rec.filesOnly)
      throw new SandboxError('sandboxd.conflict', `sandbox ${id} is paused (its files only, no VM): resume it first`);
    const vm = this.driver.get(rec.vmId);
    if (!vm) throw new SandboxError('sandboxd.not-found', `sandbox ${id} has no VM any more`);
    return vm;
  }

  /** The VM of a claim, if it has one now (idle.ts samples it). */
  vmOf(rec: SandboxRecord): MicrovmHandle | undefined {
    return this.driver.get(rec.vmId);
  }

  private mustGet(id: string): SandboxRecord {
    const rec = this.claims.get(id);
    if (!rec) throw new SandboxError('sandboxd.not-found', `sandbox ${id} not found`);
    return rec;
  }

  async release(id: string): Promise<void> {
    const rec = this.mustGet(id);
    this.claims.delete(rec);
    this.hibernationRecords.drop(rec);
    rec.rv = this.claims.nextChange();
    this.counters.releases++;
    this.state.schedule();
    this.emit('released', rec);
    if (rec.filesOnly) this.filesPause.drop(rec.id);
    await this.driver.get(rec.vmId)?.destroy();
  }

  renew(id: string, ttlSeconds: number): SandboxRecord {
    const rec = this.mustGet(id);
    this.claims.extend(rec, ttlSeconds);
    this.state.schedule();
    this.emit('changed', rec);
    // A lease ended now is ended now, not at the reaper's next tick.
    if (ttlSeconds === 0) void this.reapExpired();
    return rec;
  }

  /**
   * Set (or with undefined, clear) `id`'s idle policy: a warm pool member's Pod gets its template's once a claim adopts
   * it (vk/pod-spec.ts). Its idle clock starts now.
   */
  setIdlePolicy(id: string, seconds: number | undefined): void {
    const rec = this.mustGet(id);
    if (rec.idleHibernateSeconds === seconds) return;
    if (seconds) rec.idleHibernateSeconds = seconds;
    else delete rec.idleHibernateSeconds;
    this.idle.touch(id);
    this.claims.touch(rec);
    this.state.schedule();
  }

  /** Mark `id` handed off (SandboxRecord.handedOff), or adopted again (`false`). */
  setHandedOff(id: string, handedOff: boolean): void {
    const rec = this.mustGet(id);
    if (handedOff === (rec.handedOff === true)) return;
    if (handedOff) rec.handedOff = true;
    else delete rec.handedOff;
    this.claims.touch(rec);
    this.state.schedule();
  }

  /**
   * One sweep at a time: a sweep awaits each release (a VM's teardown), so on a busy host it can outlast the 1 s
   * tick, and a second sweep over the same expired claims would release (and count) them twice.
   */
  private async reapExpired(): Promise<void> {
    if (this.reaping) return;
    this.reaping = true;
    try {
      await this.sweepExpired();
    } finally {
      this.reaping = false;
    }
  }

  private async sweepExpired(): Promise<void> {
    const now = Date.now();
    if (this.opts.checkpointTtlMs > 0) {
      const expired = this.checkpoints.expire(this.opts.checkpointTtlMs, now);
      if (expired.length) {
        this.log.info({ checkpoints: expired }, 'checkpoints past --checkpoint-ttl-hours; deleted');
        this.state.schedule();
      }
    }
    for (const rec of this.claims.all()) {
      if (Date.parse(rec.deadline) > now) continue;
      if (rec.onExpiry && !rec.hibernated && (await this.hibernateAtExpiry(rec))) continue;
      this.counters.reaps++;
      this.log.info({ sandbox: rec.id, claimRef: rec.claimRef }, 'lease expired; releasing');
      await this.release(rec.id).catch((err: unknown) => this.log.warn({ err }, 'reaping failed'));
    }
  }

  /**
   * The lease-end hibernate (on_expiry): on success the sandbox is kept for the longest lease, then released like
   * any other. A failure is never a renewal (a VM that could not hibernate was once renewed for 24 h at every lease's
   * end, forever): false, and the caller releases it; logged and counted (`expiry-failed`, a metric).
   */
  private async hibernateAtExpiry(rec: SandboxRecord): Promise<boolean> {
    // `pause-filesystem`: keep the files only (files-pause.ts; e2b's onTimeout {action: 'pause', keepMemory: false}).
    const action = rec.onExpiry ?? 'hibernate';
    this.log.info({ sandbox: rec.id, claimRef: rec.claimRef, action }, 'lease expired; pausing it (on-expiry)');
    try {
      await (action === 'pause-filesystem' ? this.pauseFiles(rec.id) : this.hibernate(rec.id));
    } catch (err) {
      if (this.claims.get(rec.id) !== rec) return true; // released meanwhile: nothing left to do
      this.counters.expiryFailures++;
      this.log.warn(
        { err, sandbox: rec.id, claimRef: rec.claimRef },
        `${action} at the end of the lease failed; releasing the sandbox instead`,
      );
      this.emit('expiry-failed', rec, action);
      return false;
    }
    // A release meanwhile (its holder, the gateway) leaves nothing to renew.
    if (this.claims.get(rec.id) === rec) this.renew(rec.id, this.opts.maxTtlSeconds);
    return true;
  }

  /** `reason: 'idle'`: by its idle policy, so the next request wakes it; a caller's hibernate stays until resumed. */
  async hibernate(id: string, reason?: 'idle'): Promise<void> {
    const rec = this.mustGet(id);
    if (rec.hibernated) {
      if (!reason && rec.idleSuspended) {
        delete rec.idleSuspended; // a caller's hibernate of an idle-suspended sandbox: now it waits to be resumed
        this.changed(rec);
      }
      return;
    }
    if (rec.paused) await this.resume(id); // a frozen guest is snapshotted from running
    await this.vm(id).hibernate();
    rec.hibernated = true;
    if (reason === 'idle') rec.idleSuspended = true;
    this.claims.touch(rec);
    this.state.schedule();
    this.emit('changed', rec);
    if (this.opts.portableHibernation) this.hibernationRecords.enqueue(rec);
  }

  async wake(id: string): Promise<void> {
    const rec = this.mustGet(id);
    if (!rec.hibernated) return;
    this.admission?.assertWake(id);
    if (rec.filesOnly) return this.filesPause.resume(rec); // a reboot from its saved files
    if (!this.hasRoom())
      throw new SandboxError(
        'sandboxd.at-capacity',
        `node ${this.opts.nodeName} runs ${this.opts.maxClaims} sandboxes already: release or hibernate one, then resume ${id}`,
      );
    // Counted as running from here: two wakes at the last slot do not both start a VM.
    await this.reserving(1, () => this.vm(id).restore());
    rec.hibernated = false;
    delete rec.idleSuspended;
    this.hibernationRecords.drop(rec);
    this.claims.touch(rec);
    this.state.schedule();
    this.emit('changed', rec);
  }

  /**
   * Memory-resident pause (QMP stop): the vCPUs stop, the guest's RAM stays in the VMM, resume takes ~2 ms. What
   * the node does for "pause" unless `--pause-mode=hibernate` (docs/sandboxd-api.md "Sandboxes").
   */
  async pause(id: string): Promise<void> {
    const rec = this.mustGet(id);
    if (rec.hibernated) return this.hibernate(id); // idle-suspended: from now on paused by the caller
    if (rec.paused) return;
    await this.vm(id).pause();
    rec.paused = true;
    this.changed(rec);
  }

  /**
   * Filesystem-only pause (files-pause.ts): save the guest's writable layer on this node's disk and destroy the VM,
   * keeping the claim; resume() boots a fresh VM with those files. Idempotent on a sandbox paused so.
   */
  pauseFiles(id: string): Promise<void> {
    return this.filesPause.pause(this.mustGet(id));
  }

  /** Undo pause or hibernate, whichever the sandbox is in; idempotent on a running one. */
  async resume(id: string): Promise<void> {
    const rec = this.mustGet(id);
    if (rec.hibernated) return this.wake(id);
    if (!rec.paused) return;
    await this.vm(id).resume();
    rec.paused = false;
    this.changed(rec);
  }

  private changed(rec: SandboxRecord): void {
    this.claims.touch(rec);
    this.state.schedule();
    this.emit('changed', rec);
  }

  /** Children share the parent's disk and memory at the moment of the fork; each is an independent claim. */
  async fork(id: string, count: number, ttlSeconds?: number, objects?: readonly ForkChild[]): Promise<SandboxRecord[]> {
    const rec = this.mustGet(id);
    if (rec.paused || rec.hibernated)
      throw new SandboxError(
        'sandboxd.conflict',
        `sandbox ${id} is ${rec.paused ? 'paused' : 'hibernated'}: resume it first`,
      );
    this.admission?.assertClaim();
    if (!Number.isInteger(count) || count < 1 || count > MAX_FORK_COUNT)
      throw new SandboxError('sandboxd.bad-request', `count: must be 1..${MAX_FORK_COUNT} (got ${count})`);
    if (objects && objects.length !== count)
      throw new SandboxError('sandboxd.bad-request', `objects: ${objects.length} given for count ${count}`);
    const refs = (objects ?? []).map((o) => o.claimRef);
    const twice = refs.findIndex((r, i) => refs.indexOf(r) !== i);
    if (twice >= 0)
      throw new SandboxError(
        'sandboxd.bad-request',
        `objects[${twice}].claim_ref: ${refs[twice]} is given twice (each child needs its own)`,
      );
    // The children's refs are held from here (before the fork's await, which takes seconds) until their records are.
    const unreserve = this.claims.reserveRefs(refs);
    try {
      if (!this.hasRoom(count))
        throw new SandboxError('sandboxd.at-capacity', `forking ${count} would exceed ${this.opts.maxClaims} claims`);
      const children = await this.reserving(count, () =>
        this.vm(id).fork(count, { labels: { [LABEL_NODE]: this.opts.nodeName } }),
      );
      this.counters.forks += children.length;
      // A tenant's sandbox forks into the same tenant's sandboxes, each under the parent's egress policy.
      const records = children.map((vm, i) =>
        this.record(vm, rec.key, 'fork', {
          ttlSeconds,
          tenant: rec.tenant,
          ...(rec.idleHibernateSeconds ? { idleHibernateSeconds: rec.idleHibernateSeconds } : {}),
          ...(objects ? { claimRef: objects[i]!.claimRef, object: objects[i]!.object } : {}),
          ...(rec.network ? { network: rec.network } : {}),
        }),
      );
      return await this.durable(await this.enforced(records));
    } finally {
      unreserve();
    }
  }

  // ------------------------------------------------------------------ checkpoints

  async checkpoint(id: string, name?: string): Promise<CheckpointRecord> {
    const rec = this.mustGet(id);
    // The name, the node's bound and the namespace's quota, counted with the checkpoints being taken.
    const done = this.checkpoints.admit(rec, name, {
      node: this.opts.nodeName,
      max: this.opts.maxCheckpoints,
      maxPerScope: this.opts.maxCheckpointsPerNamespace,
    });
    try {
      const template = await this.vm(id).checkpoint(name ? `${name}@${id}` : undefined);
      const ck = await this.checkpoints.add(id, rec.key, template, name, rec);
      if (rec.network) ck.network = rec.network;
      // Written before the answer (a checkpoint takes seconds; the write is nothing next to it), so a checkpoint
      // the API has answered for is never lost to a crash, and its directory never looks orphaned at the next start.
      await this.state.flush();
      // Placement copies it to peers (placement/replicate.ts) once it is on disk and in the state file.
      this.emit('checkpoint', ck);
      return ck;
    } finally {
      done();
    }
  }

  listCheckpoints(): CheckpointRecord[] {
    return this.checkpoints.list();
  }

  /** The checkpoint store itself, for placement (serving records to peers, publishing pulled ones). */
  get checkpointStore(): Checkpoints {
    return this.checkpoints;
  }

  /** Write the state file now (after publishing a pulled checkpoint: answered claims must find it after a crash). */
  saveState(): Promise<void> {
    return this.state.flush();
  }

  deleteCheckpoint(id: string): boolean {
    if (!this.checkpoints.delete(id)) return false;
    this.state.schedule();
    // A handed-off claim's record deleted (consumed by the node its replacement Pod resumed on): it runs there now.
    for (const rec of this.claims.all())
      if (rec.handedOff && rec.hibernationCheckpoint === id) {
        this.log.info(
          { sandbox: rec.id, claimRef: rec.claimRef, checkpoint: id },
          'handed-off sandbox resumed elsewhere; releasing it here',
        );
        void this.release(rec.id).catch((err: unknown) =>
          this.log.warn({ err, sandbox: rec.id }, 'releasing a handed-off sandbox failed; its lease ends it'),
        );
      }
    return true;
  }

  async claimCheckpoint(
    id: string,
    ttlSeconds?: number,
    identity?: { claimRef: string; object: unknown },
    onExpiry?: ExpiryAction,
    /** The clone's policy from the checkpoint's (network-policy.ts updatedPolicy); absent: the checkpoint's. */
    network?: (inherited: VmNetworkPolicy | undefined) => VmNetworkPolicy | undefined,
    idleHibernateSeconds?: number,
    /** A sandbox resumed here from its hibernation record: where it was (SandboxRecord.resumedFrom). */
    resumedFrom?: SandboxRecord['resumedFrom'],
  ): Promise<SandboxRecord> {
    this.admission?.assertClaim();
    const ck = this.checkpoints.get(id);
    if (!ck) throw new SandboxError('sandboxd.not-found', `checkpoint ${id} not found`);
    // A clone enforces what the sandbox it was taken of did, unless its claim says otherwise.
    const policy = network ? network(ck.network) : ck.network;
    assertPolicyFits(ck.key, policy);
    const unreserve = this.claims.reserveRefs(identity ? [identity.claimRef] : []);
    try {
      if (!this.hasRoom()) throw new SandboxError('sandboxd.at-capacity', `node ${this.opts.nodeName} is at capacity`);
      const vm = await this.reserving(1, () =>
        this.driver.clone(ck.template, { labels: { [LABEL_NODE]: this.opts.nodeName }, keepSpares: false }),
      );
      const record = this.record(vm, ck.key, 'checkpoint', {
        ttlSeconds,
        fromCheckpoint: id,
        ...identity,
        ...(onExpiry ? { onExpiry } : {}),
        ...(idleHibernateSeconds ? { idleHibernateSeconds } : {}),
        ...(resumedFrom ? { resumedFrom } : {}),
        ...(policy && ck.key.net === 'egress' ? { network: policy } : {}),
      });
      const made = await this.durable(await this.enforced(record));
      // A hibernation record is consumed by its resume: the sandbox runs here now, and its copies are stale.
      if (ck.kind === 'hibernation') this.hibernationRecords.dropCheckpoint(ck.id);
      return made;
    } finally {
      unreserve();
    }
  }

  /** Publish the sandbox's current state as a node-local template (PromotedTemplates) named `name`. */
  async promote(id: string, name: string): Promise<PromotedTemplate> {
    const rec = this.mustGet(id);
    const key = PromotedTemplates.keyFor(name, rec.key);
    const p = await this.promoted.add(key, id, await this.vm(id).checkpoint(`${key.template}@${id}`));
    await this.state.flush();
    this.log.info({ sandbox: id, key }, 'sandbox promoted to a node-local template');
    return p;
  }
}
