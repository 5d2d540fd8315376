import { createHash, randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { rename, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { SandboxError } from '../errors.js';
import { silentLogger, type Logger } from '../log/logger.js';
import { QemuMicrovmDriver, templateFromImage, type Template, type Vm } from '../vmm/index.js';
import { ensureGuestImage, GUEST_TEMPLATES, silentProgress } from '../guest/index.js';
import { keyString, SIZE_TIERS, type PoolKey } from './pool-key.js';

/**
 * The node's microVM engine: warm pools per key refilled by copy-on-write clones in the background, claims that
 * pop a running VM from memory (no boot and no I/O on the claim path), leases with deadlines, and state that
 * survives a daemon restart (VMs keep running; claims are re-read from disk and re-attached).
 */

export interface EngineOptions {
  dataDir: string;
  nodeName: string;
  advertiseAddr: string;
  driver?: QemuMicrovmDriver;
  /** Most claimed sandboxes at once; beyond it claims get 429. */
  maxClaims?: number;
  /** Clones made in parallel while refilling. */
  refillConcurrency?: number;
  /** Wait after a claim before refilling (bursts are served first; spawning QEMU blocks the loop). */
  refillDelayMs?: number;
  /** Spare VMMs per template (see QemuDriverOptions.spareVmms); used when the engine makes its own driver. */
  spareVmms?: number;
  /**
   * Run one command (`true`) and one JSON request (a stat of `/`) in each warm VM once the refill is done, before a
   * tenant gets it. Under TCG a fresh clone's QEMU has translated none of the guest's exec path yet, so its first
   * command pays ~0.2 s for that, and its first JSON request (files, port-forward, signals) ~25 ms more for the
   * agent's JSON path, which exec no longer takes (binary EXEC frame); priming pays both in the background, and
   * claims take primed VMs first. Default true.
   */
  primeWarmVms?: boolean;
  defaultTtlSeconds?: number;
  maxTtlSeconds?: number;
  logger?: Logger;
  /** VM run dirs (sockets, logs). Default: under /run when root (QEMU drops to an unprivileged user that must
   * reach them, and unix socket paths are short there), else `<dataDir>/vms`. */
  runRoot?: string;
}

/** One run root per data dir, so two daemons on one host never adopt each other's VMs. */
export function defaultRunRoot(dataDir: string): string {
  if (process.getuid?.() !== 0) return join(dataDir, 'vms');
  return join(
    '/run/sandbox-operator',
    `sandboxd-${createHash('sha256').update(resolve(dataDir)).digest('hex').slice(0, 12)}`,
  );
}

export interface ClaimRequest {
  key: PoolKey;
  ttlSeconds?: number;
  claimRef?: string;
  /** Provision a dedicated VM when the pool is empty (default true). */
  provisionOnMiss?: boolean;
  /**
   * Prime a provisioned VM after handing it out (see EngineOptions.primeWarmVms), for holders that keep a VM idle
   * until someone else uses it, like a virtual-kubelet pod in a warm pool. Off for API tenants, who would see a
   * command they did not run.
   */
  primeAfter?: boolean;
}

export interface SandboxRecord {
  id: string;
  token: string;
  key: PoolKey;
  vmId: string;
  claimRef?: string;
  claimedAt: string;
  deadline: string;
  hibernated: boolean;
  fromCheckpoint?: string;
  /** How the claim was served: warm pop or on-demand clone. */
  source: 'warm' | 'provisioned' | 'fork' | 'checkpoint';
}

export interface PoolStatus {
  key: PoolKey;
  warm: number;
  /** Of `warm`, how many have run their first command (see EngineOptions.primeWarmVms). */
  primed: number;
  refilling: number;
  target: number;
  golden: boolean;
}

interface Pool {
  key: PoolKey;
  target: number;
  warm: Vm[];
  refilling: number;
  template?: Template;
  lastError?: string;
}

export interface CheckpointRecord {
  id: string;
  name?: string;
  sandboxId: string;
  key: PoolKey;
  createdAt: string;
  template: Template;
}

/**
 * CSPRNG bytes drawn in 4 KiB blocks: one randomBytes call per ~128 claims instead of two per claim (each sync call
 * costs ~7 µs here, a visible share of a sub-millisecond claim). Bytes are never reused.
 */
class RandomPool {
  private buf = Buffer.alloc(0);
  private off = 0;
  take(n: number): Buffer {
    if (this.off + n > this.buf.length) {
      this.buf = randomBytes(4096);
      this.off = 0;
    }
    const out = this.buf.subarray(this.off, this.off + n);
    this.off += n;
    return out;
  }
}
const random = new RandomPool();

const LABEL_POOL = 'sandboxd.pool';
const LABEL_NODE = 'sandboxd.node';

export class NodeEngine extends EventEmitter {
  readonly driver: QemuMicrovmDriver;
  readonly runRoot: string;
  private readonly pools = new Map<string, Pool>();
  private readonly claims = new Map<string, SandboxRecord>();
  private readonly byClaimRef = new Map<string, string>();
  private readonly checkpoints = new Map<string, CheckpointRecord>();
  private readonly templates = new Map<string, Promise<Template>>();
  private readonly log: Logger;
  private readonly opts: Required<Omit<EngineOptions, 'driver' | 'logger' | 'runRoot'>>;
  private reaper: NodeJS.Timeout | undefined;
  private persistTimer: NodeJS.Timeout | undefined;
  private persisting: Promise<void> | undefined;
  private refillTimer: NodeJS.Timeout | undefined;
  private closed = false;
  private provisioning = 0;
  /** Warm VMs whose guest has run a command (see primeWarmVms); a pool keeps them at the end of `warm`. */
  private readonly primed = new WeakSet<Vm>();
  private priming = false;
  /** Claimed VMs to prime after the pools' (ClaimRequest.primeAfter). */
  private primeQueue: Vm[] = [];
  readonly counters = { claims: 0, warmHits: 0, provisioned: 0, releases: 0, reaps: 0, forks: 0 };

  constructor(opts: EngineOptions) {
    super();
    this.opts = {
      dataDir: opts.dataDir,
      nodeName: opts.nodeName,
      advertiseAddr: opts.advertiseAddr,
      maxClaims: opts.maxClaims ?? 200,
      refillConcurrency: opts.refillConcurrency ?? 2,
      refillDelayMs: opts.refillDelayMs ?? 25,
      spareVmms: opts.spareVmms ?? 1,
      primeWarmVms: opts.primeWarmVms ?? true,
      defaultTtlSeconds: opts.defaultTtlSeconds ?? 300,
      maxTtlSeconds: opts.maxTtlSeconds ?? 86_400,
    };
    this.log = opts.logger ?? silentLogger;
    mkdirSync(this.opts.dataDir, { recursive: true });
    this.runRoot = opts.runRoot ?? defaultRunRoot(this.opts.dataDir);
    this.driver =
      opts.driver ?? new QemuMicrovmDriver({ runRoot: this.runRoot, logger: this.log, spareVmms: this.opts.spareVmms });
  }

  get nodeName(): string {
    return this.opts.nodeName;
  }

  get advertiseAddr(): string {
    return this.opts.advertiseAddr;
  }

  /** Re-attach to VMs a previous daemon left running; reap the ones nothing accounts for. */
  async start(): Promise<{ adopted: number; reaped: number }> {
    const saved = this.readState();
    let adopted = 0;
    let reaped = await this.driver.reapOrphanSpares();
    for (const rec of this.driver.list()) {
      if (rec.labels[LABEL_NODE] !== this.opts.nodeName) continue;
      const claim = saved.claims.find((c) => c.vmId === rec.id);
      if (!rec.alive && rec.state !== 'hibernated') {
        this.driver.removeStale(rec.id);
        if (claim)
          this.log.warn({ sandbox: claim.id }, 'claimed VM died while the daemon was down; dropping the claim');
        continue;
      }
      try {
        const vm = await this.driver.adopt(rec.id);
        if (claim) {
          this.claims.set(claim.id, claim);
          if (claim.claimRef) this.byClaimRef.set(claim.claimRef, claim.id);
          adopted++;
        } else {
          // Not a recorded claim. It may be a warm VM, or one claimed in the last few ms before a crash (the claim
          // table is written off the claim path), whose tenant may already have used it. Never hand it out again:
          // destroy it; the pool refills from the template.
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
    for (const target of saved.targets) {
      const pool = this.ensurePool(target.key, target.warm);
      pool.target = target.warm;
    }
    this.reaper = setInterval(() => void this.reapExpired(), 1000);
    this.reaper.unref();
    this.schedulePersist();
    for (const pool of this.pools.values()) this.refill(pool);
    this.log.info({ adopted, reaped, claims: this.claims.size }, 'engine started');
    return { adopted, reaped };
  }

  async close(opts: { destroyVms: boolean }): Promise<void> {
    this.closed = true;
    if (this.reaper) clearInterval(this.reaper);
    if (this.refillTimer) clearTimeout(this.refillTimer);
    await this.flushPersist();
    await this.driver.close();
    if (opts.destroyVms) {
      await this.driver.destroyAll();
      this.claims.clear();
      for (const p of this.pools.values()) p.warm = [];
      await this.flushPersist();
      // Only this engine's VMs live here, and all are gone now.
      rmSync(this.runRoot, { recursive: true, force: true });
    }
  }

  // ------------------------------------------------------------------ templates

  knownTemplates(): string[] {
    return Object.keys(GUEST_TEMPLATES);
  }

  assertKnownTemplate(template: string): void {
    if (!GUEST_TEMPLATES[template])
      throw new SandboxError('bad-request', `template: unknown template "${template}"`, {
        hint: `known templates: ${this.knownTemplates().join(', ')}`,
      });
  }

  /** The snapshot every clone of this key starts from (built once, cached on disk by content hash). */
  template(key: PoolKey): Promise<Template> {
    const k = keyString(key);
    let t = this.templates.get(k);
    if (!t) {
      t = (async () => {
        this.assertKnownTemplate(key.template);
        const img = await ensureGuestImage(key.template, { progress: silentProgress });
        const spec = templateFromImage(img);
        const tier = SIZE_TIERS[key.size];
        return this.driver.createTemplate(
          {
            ...spec,
            name: `${key.template}@${key.net}-${key.size}`,
            memoryMiB: Math.max(tier.memoryMiB, spec.memoryMiB ?? 0),
            vcpus: tier.vcpus,
            network: key.net,
          },
          { progress: (l) => this.log.info({ template: k }, l) },
        );
      })();
      t.catch(() => this.templates.delete(k));
      this.templates.set(k, t);
    }
    return t;
  }

  /** Build the named template without a pool (e.g. at startup, to make the first claim fast). */
  async prepare(key: PoolKey): Promise<void> {
    await this.template(key);
  }

  // ------------------------------------------------------------------ pools

  private ensurePool(key: PoolKey, target: number): Pool {
    const k = keyString(key);
    let pool = this.pools.get(k);
    if (!pool) {
      pool = { key, target, warm: [], refilling: 0 };
      this.pools.set(k, pool);
    }
    return pool;
  }

  /** Replace this node's warm targets wholesale; pools left out are drained (claims are never touched). */
  setTargets(targets: Array<{ key: PoolKey; warm: number }>): void {
    const wanted = new Map(targets.map((t) => [keyString(t.key), t]));
    if (wanted.size !== targets.length) throw new SandboxError('bad-request', 'pools: duplicate pool');
    for (const t of targets) this.assertKnownTemplate(t.key.template);
    for (const [k, pool] of this.pools) {
      if (!wanted.has(k)) pool.target = 0;
    }
    for (const t of targets) this.ensurePool(t.key, t.warm).target = t.warm;
    for (const pool of this.pools.values()) {
      this.trim(pool);
      this.refill(pool);
    }
    this.schedulePersist();
  }

  poolStatus(): PoolStatus[] {
    return [...this.pools.values()]
      .filter((p) => p.target > 0 || p.warm.length > 0 || p.refilling > 0)
      .map((p) => ({
        key: p.key,
        warm: p.warm.length,
        primed: p.warm.filter((v) => this.primed.has(v)).length,
        refilling: p.refilling,
        target: p.target,
        golden: p.template !== undefined,
      }));
  }

  poolErrors(): Array<{ key: PoolKey; error: string }> {
    return [...this.pools.values()].filter((p) => p.lastError).map((p) => ({ key: p.key, error: p.lastError! }));
  }

  warmCount(key: PoolKey): number {
    return this.pools.get(keyString(key))?.warm.length ?? 0;
  }

  private trim(pool: Pool): void {
    while (pool.warm.length > pool.target) {
      const vm = pool.warm.shift()!; // unprimed ones first
      void vm
        .destroy()
        .catch((err: unknown) => this.log.warn({ err, vm: vm.id }, 'destroying a surplus warm VM failed'));
    }
  }

  /**
   * Refill off the claim path: spawning QEMU blocks the event loop for milliseconds (fork/exec), so a claim never
   * triggers it synchronously, and a burst of claims is served before the first clone starts.
   */
  private scheduleRefill(pool: Pool): void {
    if (this.refillTimer) return;
    this.refillTimer = setTimeout(() => {
      this.refillTimer = undefined;
      this.refill(pool);
      for (const p of this.pools.values()) if (p !== pool) this.refill(p);
    }, this.opts.refillDelayMs);
    this.refillTimer.unref();
  }

  private refill(pool: Pool): void {
    if (this.closed) return;
    while (pool.warm.length + pool.refilling < pool.target && this.inFlight() < this.opts.refillConcurrency) {
      pool.refilling++;
      void this.cloneInto(pool).finally(() => {
        pool.refilling--;
        // Refill the neediest pool next, so one big pool does not starve the others.
        for (const p of [...this.pools.values()].sort(
          (a, b) => a.warm.length / (a.target || 1) - b.warm.length / (b.target || 1),
        ))
          this.refill(p);
        this.prime();
      });
    }
  }

  /**
   * Prime one VM at a time, and only while no clone is in flight (filling pools and serving misses come first):
   * unprimed warm VMs, then claimed VMs queued by primeAfter. A warm VM claimed while it is being primed is the
   * tenant's; its priming result is then ignored.
   */
  private prime(): void {
    if (!this.opts.primeWarmVms || this.priming || this.closed || this.inFlight() > 0) return;
    for (const pool of this.pools.values()) {
      const vm = pool.warm.find((v) => !this.primed.has(v));
      if (vm) return this.primeOne(vm, pool);
    }
    const claimed = this.primeQueue.shift();
    if (claimed) this.primeOne(claimed);
  }

  private primeOne(vm: Vm, pool?: Pool): void {
    this.priming = true;
    void vm
      .run(['true'], { timeoutMs: 30_000 })
      .then(() => vm.agent.files.stat('/'))
      .then(
        () => {
          this.primed.add(vm);
          const i = pool ? pool.warm.indexOf(vm) : -1;
          if (pool && i >= 0) pool.warm.push(...pool.warm.splice(i, 1));
        },
        (err: unknown) => {
          const i = pool ? pool.warm.indexOf(vm) : -1;
          if (!pool || i < 0) return; // claimed or released meanwhile: not ours to judge
          this.log.warn({ err, vm: vm.id }, 'a warm VM failed its first command; replacing it');
          pool.warm.splice(i, 1);
          void vm.destroy().catch(() => undefined);
          this.refill(pool);
        },
      )
      .finally(() => {
        this.priming = false;
        this.prime();
      });
  }

  private inFlight(): number {
    let n = this.provisioning;
    for (const p of this.pools.values()) n += p.refilling;
    return n;
  }

  private async cloneInto(pool: Pool): Promise<void> {
    try {
      const template = await this.template(pool.key);
      pool.template = template;
      const vm = await this.driver.clone(template, {
        labels: { [LABEL_POOL]: keyString(pool.key), [LABEL_NODE]: this.opts.nodeName },
      });
      if (this.closed || pool.warm.length >= pool.target) {
        await vm.destroy();
        return;
      }
      // Unprimed VMs go to the front: claims pop from the end, where the primed ones are.
      pool.warm.unshift(vm);
      pool.lastError = undefined;
      this.emit('warm', pool.key);
    } catch (err) {
      if (this.closed) return; // shutting down: the driver is destroying VMs, including half-started ones
      pool.lastError = err instanceof Error ? err.message : String(err);
      this.log.warn({ err, pool: keyString(pool.key) }, 'refill clone failed');
      await new Promise((r) => setTimeout(r, 1000).unref());
    }
  }

  // ------------------------------------------------------------------ claims

  get claimedCount(): number {
    return this.claims.size;
  }

  get maxClaims(): number {
    return this.opts.maxClaims;
  }

  /**
   * Hand over a running VM. Warm hit: pop from memory and answer (the refill and the state write happen after).
   * Miss: clone one now (tens of ms) unless `provisionOnMiss` is false.
   */
  async claim(req: ClaimRequest): Promise<SandboxRecord> {
    const warm = this.claimWarm(req);
    if (warm) return warm;
    this.assertKnownTemplate(req.key.template);
    if (req.provisionOnMiss === false) throw new SandboxError('warm-miss', `no warm sandbox for ${keyString(req.key)}`);
    this.provisioning++;
    let vm: Vm;
    try {
      vm = await this.driver.clone(await this.template(req.key), { labels: { [LABEL_NODE]: this.opts.nodeName } });
    } finally {
      this.provisioning--;
    }
    this.counters.provisioned++;
    if (req.primeAfter && this.opts.primeWarmVms) {
      this.primeQueue.push(vm);
      queueMicrotask(() => this.prime());
    }
    const record = this.record(vm, req.key, 'provisioned', req.ttlSeconds, req.claimRef);
    const pool = this.pools.get(keyString(req.key));
    if (pool) this.scheduleRefill(pool);
    return record;
  }

  /**
   * The warm half of claim(), synchronous so a listener can answer in the same tick the request arrived in:
   * a record for a VM popped from the pool, or undefined when the pool has none (then claim() provisions).
   */
  claimWarm(req: ClaimRequest): SandboxRecord | undefined {
    if (this.claims.size >= this.opts.maxClaims)
      throw new SandboxError(
        'at-capacity',
        `node ${this.opts.nodeName} is at capacity (${this.opts.maxClaims} claims)`,
      );
    const pool = this.pools.get(keyString(req.key));
    const vm = pool?.warm.pop();
    if (!pool || !vm) return undefined;
    this.counters.warmHits++;
    const record = this.record(vm, req.key, 'warm', req.ttlSeconds, req.claimRef);
    this.scheduleRefill(pool);
    return record;
  }

  private record(
    vm: Vm,
    key: PoolKey,
    source: SandboxRecord['source'],
    ttlSeconds: number | undefined,
    claimRef?: string,
  ): SandboxRecord {
    const now = Date.now();
    const rec: SandboxRecord = {
      id: `sb_${random.take(8).toString('hex')}`,
      token: random.take(24).toString('base64url'),
      key,
      vmId: vm.id,
      claimedAt: new Date(now).toISOString(),
      deadline: new Date(now + this.ttlMs(ttlSeconds)).toISOString(),
      hibernated: false,
      source,
      ...(claimRef ? { claimRef } : {}),
    };
    this.claims.set(rec.id, rec);
    if (claimRef) this.byClaimRef.set(claimRef, rec.id);
    this.counters.claims++;
    this.schedulePersist();
    this.emit('claimed', rec);
    return rec;
  }

  private ttlMs(ttlSeconds: number | undefined): number {
    const s =
      !ttlSeconds || ttlSeconds <= 0 ? this.opts.defaultTtlSeconds : Math.min(ttlSeconds, this.opts.maxTtlSeconds);
    return s * 1000;
  }

  get(id: string): SandboxRecord | undefined {
    return this.claims.get(id);
  }

  byRef(claimRef: string): SandboxRecord | undefined {
    const id = this.byClaimRef.get(claimRef);
    return id ? this.claims.get(id) : undefined;
  }

  list(filter: { claimRef?: string } = {}): SandboxRecord[] {
    const all = [...this.claims.values()];
    return filter.claimRef ? all.filter((c) => c.claimRef === filter.claimRef) : all;
  }

  /** Whether the VM of claim `id` has run its first command (EngineOptions.primeWarmVms). */
  isPrimed(id: string): boolean {
    return this.primed.has(this.vm(id));
  }

  vm(id: string): Vm {
    const rec = this.mustGet(id);
    const vm = this.driver.get(rec.vmId);
    if (!vm) throw new SandboxError('not-found', `sandbox ${id} has no VM any more`);
    return vm;
  }

  private mustGet(id: string): SandboxRecord {
    const rec = this.claims.get(id);
    if (!rec) throw new SandboxError('not-found', `sandbox ${id} not found`);
    return rec;
  }

  async release(id: string): Promise<void> {
    const rec = this.mustGet(id);
    this.claims.delete(id);
    if (rec.claimRef && this.byClaimRef.get(rec.claimRef) === id) this.byClaimRef.delete(rec.claimRef);
    this.counters.releases++;
    this.schedulePersist();
    this.emit('released', rec);
    await this.driver.get(rec.vmId)?.destroy();
  }

  renew(id: string, ttlSeconds: number): SandboxRecord {
    const rec = this.mustGet(id);
    rec.deadline = new Date(Date.now() + this.ttlMs(ttlSeconds)).toISOString();
    this.schedulePersist();
    return rec;
  }

  private async reapExpired(): Promise<void> {
    const now = Date.now();
    for (const rec of [...this.claims.values()]) {
      if (Date.parse(rec.deadline) <= now) {
        this.counters.reaps++;
        this.log.info({ sandbox: rec.id, claimRef: rec.claimRef }, 'lease expired; releasing');
        await this.release(rec.id).catch((err: unknown) => this.log.warn({ err }, 'reaping failed'));
      }
    }
  }

  async hibernate(id: string): Promise<void> {
    const rec = this.mustGet(id);
    this.assertNotEgress(rec, 'hibernate');
    if (rec.hibernated) return;
    await this.vm(id).hibernate();
    rec.hibernated = true;
    this.schedulePersist();
  }

  async wake(id: string): Promise<void> {
    const rec = this.mustGet(id);
    if (!rec.hibernated) return;
    await this.vm(id).restore();
    rec.hibernated = false;
    this.schedulePersist();
  }

  async fork(id: string, count: number, ttlSeconds?: number): Promise<SandboxRecord[]> {
    const rec = this.mustGet(id);
    this.assertNotEgress(rec, 'fork');
    if (!Number.isInteger(count) || count < 1 || count > 16)
      throw new SandboxError('bad-request', `count: must be 1..16 (got ${count})`);
    if (this.claims.size + count > this.opts.maxClaims)
      throw new SandboxError('at-capacity', `forking ${count} would exceed ${this.opts.maxClaims} claims`);
    const children = await this.vm(id).fork(count, { labels: { [LABEL_NODE]: this.opts.nodeName } });
    this.counters.forks += children.length;
    return children.map((vm) => this.record(vm, rec.key, 'fork', ttlSeconds));
  }

  async checkpoint(id: string, name?: string): Promise<CheckpointRecord> {
    const rec = this.mustGet(id);
    this.assertNotEgress(rec, 'checkpoint');
    const template = await this.vm(id).checkpoint(name ? `${name}@${id}` : undefined);
    const ck: CheckpointRecord = {
      id: `ck_${randomBytes(8).toString('hex')}`,
      sandboxId: id,
      key: rec.key,
      createdAt: new Date().toISOString(),
      template,
      ...(name ? { name } : {}),
    };
    this.checkpoints.set(ck.id, ck);
    this.schedulePersist();
    return ck;
  }

  listCheckpoints(): CheckpointRecord[] {
    return [...this.checkpoints.values()].sort((a, b) => b.createdAt.localeCompare(a.createdAt));
  }

  deleteCheckpoint(id: string): boolean {
    const ck = this.checkpoints.get(id);
    if (!ck) return false;
    this.checkpoints.delete(id);
    this.driver.deleteTemplate(ck.template);
    this.schedulePersist();
    return true;
  }

  async claimCheckpoint(id: string, ttlSeconds?: number): Promise<SandboxRecord> {
    const ck = this.checkpoints.get(id);
    if (!ck) throw new SandboxError('not-found', `checkpoint ${id} not found`);
    if (this.claims.size >= this.opts.maxClaims)
      throw new SandboxError('at-capacity', `node ${this.opts.nodeName} is at capacity`);
    const vm = await this.driver.clone(ck.template, { labels: { [LABEL_NODE]: this.opts.nodeName } });
    const rec = this.record(vm, ck.key, 'checkpoint', ttlSeconds);
    rec.fromCheckpoint = id;
    return rec;
  }

  private assertNotEgress(rec: SandboxRecord, verb: string): void {
    if (rec.key.net === 'egress')
      throw new SandboxError('conflict', `${verb} is not supported on the egress lane (sandbox ${rec.id})`);
  }

  // ------------------------------------------------------------------ persistence

  private statePath(): string {
    return join(this.opts.dataDir, 'state.json');
  }

  private readState(): { claims: SandboxRecord[]; targets: Array<{ key: PoolKey; warm: number }> } {
    try {
      const s = JSON.parse(readFileSync(this.statePath(), 'utf8')) as {
        claims?: SandboxRecord[];
        targets?: Array<{ key: PoolKey; warm: number }>;
      };
      return { claims: s.claims ?? [], targets: s.targets ?? [] };
    } catch {
      return { claims: [], targets: [] };
    }
  }

  /**
   * State is written off the claim path: coalesced for 20 ms, then written by libuv's thread pool (tmp + rename),
   * one write at a time, so a burst of claims never waits on the disk.
   */
  private schedulePersist(): void {
    if (this.persistTimer) return;
    this.persistTimer = setTimeout(() => this.persistInBackground(), 20);
  }

  private persistInBackground(): void {
    this.persistTimer = undefined;
    if (this.persisting) {
      this.schedulePersist();
      return;
    }
    const tmp = `${this.statePath()}.tmp`;
    this.persisting = writeFile(tmp, this.stateJson(), { mode: 0o600 })
      .then(() => rename(tmp, this.statePath()))
      .catch((err: unknown) => {
        this.log.warn({ err }, 'could not write the claim table; retrying in 1 s');
        this.persistTimer ??= setTimeout(() => this.persistInBackground(), 1000);
      })
      .finally(() => (this.persisting = undefined));
  }

  /** Write the state now (shutdown): after any background write, which would otherwise rename over this one. */
  private async flushPersist(): Promise<void> {
    if (this.persistTimer) clearTimeout(this.persistTimer);
    this.persistTimer = undefined;
    await this.persisting;
    const tmp = `${this.statePath()}.tmp`;
    writeFileSync(tmp, this.stateJson(), { mode: 0o600 });
    renameSync(tmp, this.statePath());
  }

  private stateJson(): string {
    return JSON.stringify({
      node: this.opts.nodeName,
      claims: [...this.claims.values()],
      targets: [...this.pools.values()].filter((p) => p.target > 0).map((p) => ({ key: p.key, warm: p.target })),
    });
  }
}
