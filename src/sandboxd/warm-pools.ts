import { SandboxError } from '../errors.js';
import type { Logger } from '../log/logger.js';
import { templateFromImage, type MicrovmDriver, type MicrovmHandle as Vm, type Template } from '../vmm/index.js';
import { ensureGuestImage, GUEST_TEMPLATES, primeCommand, silentProgress } from '../guest/index.js';
import { keyString, SIZE_TIERS, type PoolKey } from './pool-key.js';

/**
 * The node's warm pools: per key, running VMs cloned from the key's template in the background, refilled off the
 * claim path, and primed (their first command run) before a tenant gets them. Also the template each key clones
 * from, and the on-demand clone for a claim that finds its pool empty (it counts against the refill concurrency).
 */

/** Which node's engine made a VM: start() re-adopts only its own. */
export const LABEL_NODE = 'sandboxd.node';
const LABEL_POOL = 'sandboxd.pool';

export interface PoolStatus {
  key: PoolKey;
  /** Who set its target (`PUT /v1/pools?owner=`), when someone did. */
  owner?: string;
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
  /** Who set the target (`PUT /v1/pools?owner=`): a wholesale update by one owner leaves the others' pools alone. */
  owner?: string;
  warm: Vm[];
  refilling: number;
  template?: Template;
  lastError?: string;
}

export interface WarmPoolsOptions {
  driver: MicrovmDriver;
  nodeName: string;
  log: Logger;
  refillConcurrency: number;
  refillDelayMs: number;
  primeWarmVms: boolean;
  /** A pool gained a warm VM. */
  onWarm: (key: PoolKey) => void;
  /** Node-local templates (promoted sandboxes) by key, and whether a name is one; they win over built-in ones. */
  local?: { get(key: PoolKey): Template | undefined; has(name: string): boolean };
}

export class WarmPools {
  private readonly pools = new Map<string, Pool>();
  private readonly templates = new Map<string, Promise<Template>>();
  private readonly log: Logger;
  private refillTimer: NodeJS.Timeout | undefined;
  private closed = false;
  /** Draining (suspend()): no refill, no warm VM kept. */
  private suspended = false;
  private provisioning = 0;
  /** Warm VMs whose guest has run a command (see primeWarmVms); a pool keeps them at the end of `warm`. */
  private readonly primed = new WeakSet<Vm>();
  private priming = false;
  /** Claimed VMs to prime after the pools' (ClaimRequest.primeAfter). */
  private primeQueue: Vm[] = [];

  constructor(private readonly opts: WarmPoolsOptions) {
    this.log = opts.log;
  }

  /**
   * While the node drains (drain.ts): no refill, and the warm VMs are destroyed (a draining node hands none out);
   * the targets are kept, so resume() refills them. Returns how many warm VMs were destroyed.
   */
  suspend(): number {
    this.suspended = true;
    let destroyed = 0;
    for (const pool of this.pools.values())
      for (const vm of pool.warm.splice(0)) {
        destroyed++;
        void vm.destroy().catch((err: unknown) => this.log.warn({ err, vm: vm.id }, 'destroying a warm VM failed'));
      }
    return destroyed;
  }

  /** Undo suspend(): refill to the targets. */
  resume(): void {
    if (!this.suspended) return;
    this.suspended = false;
    this.refillAll();
  }

  /** Stop refilling and priming for good (the driver is about to destroy or leave the VMs). */
  close(): void {
    this.closed = true;
    if (this.refillTimer) clearTimeout(this.refillTimer);
  }

  /** Forget every warm VM (their VMs were destroyed with the driver's). */
  forgetWarm(): void {
    for (const p of this.pools.values()) p.warm = [];
  }

  // ------------------------------------------------------------------ templates

  knownTemplates(): string[] {
    return Object.keys(GUEST_TEMPLATES);
  }

  assertKnownTemplate(template: string): void {
    if (!GUEST_TEMPLATES[template] && !this.opts.local?.has(template))
      throw new SandboxError('sandboxd.bad-request', `template: unknown template "${template}"`, {
        hint: `known templates: ${this.knownTemplates().join(', ')}`,
      });
  }

  /** The snapshot every clone of this key starts from (built once, cached on disk by content hash). */
  template(key: PoolKey): Promise<Template> {
    const local = this.opts.local?.get(key);
    if (local) return Promise.resolve(local);
    if (!GUEST_TEMPLATES[key.template] && this.opts.local?.has(key.template))
      return Promise.reject(
        new SandboxError(
          'sandboxd.bad-request',
          `template: ${key.template} is promoted on this node for another net/size`,
          {
            hint: 'claim it with the net and size of the sandbox it was promoted from',
          },
        ),
      );
    const k = keyString(key);
    let t = this.templates.get(k);
    if (!t) {
      t = (async () => {
        this.assertKnownTemplate(key.template);
        const img = await ensureGuestImage(key.template, { progress: silentProgress });
        const spec = templateFromImage(img);
        const tier = SIZE_TIERS[key.size];
        return this.opts.driver.createTemplate(
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

  // ------------------------------------------------------------------ pools

  ensurePool(key: PoolKey, target: number, owner?: string): void {
    const pool = this.pool(key, target);
    pool.target = target;
    if (owner) pool.owner = owner;
  }

  private pool(key: PoolKey, target: number): Pool {
    const k = keyString(key);
    let pool = this.pools.get(k);
    if (!pool) {
      pool = { key, target, warm: [], refilling: 0 };
      this.pools.set(k, pool);
    }
    return pool;
  }

  /**
   * Replace this node's warm targets wholesale; pools left out are drained (claims are never touched). With an
   * `owner`, only that owner's pools are replaced (and the ones given become its): a driver never drains pools it
   * did not set, such as the node's own `--pools`.
   */
  setTargets(targets: Array<{ key: PoolKey; warm: number }>, owner?: string): void {
    const wanted = new Map(targets.map((t) => [keyString(t.key), t]));
    if (wanted.size !== targets.length) throw new SandboxError('sandboxd.bad-request', 'pools: duplicate pool');
    for (const t of targets) this.assertKnownTemplate(t.key.template);
    for (const [k, pool] of this.pools) {
      if (!wanted.has(k) && (owner === undefined || pool.owner === owner)) pool.target = 0;
    }
    for (const t of targets) {
      const pool = this.pool(t.key, t.warm);
      pool.target = t.warm;
      pool.owner = owner;
    }
    for (const pool of this.pools.values()) {
      this.trim(pool);
      this.refill(pool);
    }
  }

  /** The warm targets worth keeping across a restart. */
  targets(): Array<{ key: PoolKey; warm: number; owner?: string }> {
    return [...this.pools.values()]
      .filter((p) => p.target > 0)
      .map((p) => ({ key: p.key, warm: p.target, ...(p.owner ? { owner: p.owner } : {}) }));
  }

  status(): PoolStatus[] {
    return [...this.pools.values()]
      .filter((p) => p.target > 0 || p.warm.length > 0 || p.refilling > 0)
      .map((p) => ({
        key: p.key,
        ...(p.owner ? { owner: p.owner } : {}),
        warm: p.warm.length,
        primed: p.warm.filter((v) => this.primed.has(v)).length,
        refilling: p.refilling,
        target: p.target,
        golden: p.template !== undefined,
      }));
  }

  errors(): Array<{ key: PoolKey; error: string }> {
    return [...this.pools.values()].filter((p) => p.lastError).map((p) => ({ key: p.key, error: p.lastError! }));
  }

  warmCount(key: PoolKey): number {
    return this.pools.get(keyString(key))?.warm.length ?? 0;
  }

  /** Pop a warm VM (primed ones first), or undefined when the pool has none; the refill follows later. */
  take(key: PoolKey): Vm | undefined {
    const pool = this.pools.get(keyString(key));
    const vm = pool?.warm.pop();
    if (!pool || !vm) return undefined;
    this.scheduleRefill(pool);
    return vm;
  }

  /** Clone a VM for a claim that found its pool empty. */
  async provision(key: PoolKey): Promise<Vm> {
    this.provisioning++;
    try {
      return await this.opts.driver.clone(await this.template(key), {
        labels: { [LABEL_NODE]: this.opts.nodeName },
      });
    } finally {
      this.provisioning--;
    }
  }

  /** After a miss: refill the key's pool soon, if it has one. */
  refillSoon(key: PoolKey): void {
    const pool = this.pools.get(keyString(key));
    if (pool) this.scheduleRefill(pool);
  }

  refillAll(): void {
    for (const pool of this.pools.values()) this.refill(pool);
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
    if (this.closed || this.suspended) return;
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

  private inFlight(): number {
    let n = this.provisioning;
    for (const p of this.pools.values()) n += p.refilling;
    return n;
  }

  private async cloneInto(pool: Pool): Promise<void> {
    try {
      const template = await this.template(pool.key);
      pool.template = template;
      const vm = await this.opts.driver.clone(template, {
        labels: { [LABEL_POOL]: keyString(pool.key), [LABEL_NODE]: this.opts.nodeName },
      });
      if (this.closed || this.suspended || pool.warm.length >= pool.target) {
        await vm.destroy();
        return;
      }
      // Unprimed VMs go to the front: claims pop from the end, where the primed ones are.
      pool.warm.unshift(vm);
      pool.lastError = undefined;
      this.opts.onWarm(pool.key);
    } catch (err) {
      if (this.closed) return; // shutting down: the driver is destroying VMs, including half-started ones
      pool.lastError = err instanceof Error ? err.message : String(err);
      this.log.warn({ err, pool: keyString(pool.key) }, 'refill clone failed');
      await new Promise((r) => setTimeout(r, 1000).unref());
    }
  }

  // ------------------------------------------------------------------ priming

  isPrimed(vm: Vm): boolean {
    return this.primed.has(vm);
  }

  /** Prime a claimed VM once the pools' own are done (ClaimRequest.primeAfter); nothing when priming is off. */
  primeLater(vm: Vm): void {
    if (!this.opts.primeWarmVms) return;
    this.primeQueue.push(vm);
    queueMicrotask(() => this.prime());
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
      .run([...primeCommand(vm.record.template.name)], { timeoutMs: 30_000 })
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
}
