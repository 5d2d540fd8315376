/**
 * Draining a node (docs/sandboxd.md "Draining"): the node stops taking work and puts every sandbox it runs on disk,
 * so it can be taken down without losing one. Asked for by the operator (`POST /v1/drain`, drain-routes.ts) or by
 * Kubernetes (the virtual kubelet sees one of this daemon's Nodes cordoned: `kubectl cordon`, the first step of
 * `kubectl drain`); each asker is a *reason*, and the node drains while any reason holds.
 *
 * While draining:
 * - every new claim is refused (`sandboxd.draining`, 429, naming the node and saying to claim elsewhere): the engine
 *   checks the gate on every claim path (claim, fork, checkpoint claim), so the HTTP API, the claim gateway, the
 *   virtual kubelet and sandbox-apiserver's creates all get the same answer; the change feed says `draining`, and
 *   sandbox-apiserver's fleet places no create here;
 * - the warm pools stop refilling and their warm VMs are destroyed (targets are kept);
 * - every claimed sandbox that runs (or is paused in memory) is hibernated, DRAIN_CONCURRENCY at a time, each logged
 *   with the progress, which `GET /v1/info` and NodeInventory report. A claim in flight when the drain starts was
 *   admitted before the gate: it completes and is then hibernated like the others (the loop waits for the claims in
 *   flight before it calls the drain done); nothing is half made;
 * - a wake (resume of a hibernated sandbox) is refused the same way: the sandbox stays listed and hibernated here,
 *   and a wake would put it back in RAM on a node that is being emptied (and a reboot then would lose it).
 *
 * Undrained (every reason gone), the node takes claims again, refills its pools, and wakes the sandboxes this drain
 * hibernated that were running when it did (a sandbox the drain found paused stays hibernated until its owner
 * resumes it; one hibernated before the drain is not the drain's to wake).
 *
 * Resuming elsewhere: with `--checkpoint-replicas` > 1 every hibernation (the drain's too) is also published as a
 * `hibernation` record that peers copy, and sandbox-apiserver resumes a sandbox from a copy when its node is gone or
 * draining (docs/placement.md "Resume anywhere"); `portable` counts the hibernated sandboxes that have a record, and
 * `copied` those whose record has every copy the replicator wants (its last count). `done` means nothing runs here
 * any more; the node's disk may go once `copied` equals `hibernated` too (docs/sandboxd.md "Draining").
 *
 * `kubectl drain` evicts the Pods of a virtual-kubelet node after its cordon: the virtual kubelet keeps an evicted
 * Sandbox Pod's claim hibernated (`handedOff`, which the undrain does not wake) for the replacement Pod to resume from
 * its record elsewhere (vk/pod-lifecycle.ts, placement/handoff.ts).
 *
 * The operator's reason survives a restart (`<data-dir>/drain.json`, with the ids to wake at the undrain); a
 * cordon is read again from the Node when the virtual kubelet starts.
 */
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { SandboxError } from '../errors.js';
import { silentLogger, type Logger } from '../log/logger.js';
import type { ClaimAdmission, NodeEngine, SandboxRecord } from './engine.js';
import type { Copies } from './placement/replicate.js';

/** Sandboxes hibernated (or woken) at once: each one writes its RAM to disk, and claims in flight share the host. */
export const DRAIN_CONCURRENCY = 2;
/** Attempts per sandbox before the drain leaves it running and reports it in `failed`. */
const MAX_ATTEMPTS = 3;
/** The operator's reason (`POST /v1/drain`); a cordon's is `node/<name>`. */
export const API_REASON = 'api';

export interface DrainOptions {
  engine: NodeEngine;
  dataDir: string;
  logger?: Logger;
  concurrency?: number;
}

/** The progress `GET /v1/info` reports (`drain`) and `POST|DELETE /v1/drain` answer. */
export interface DrainStatus {
  since: string;
  /** Who asked: `api`, `node/<name>` (a cordoned Node). */
  reasons: string[];
  /** Sandboxes this drain has hibernated. */
  hibernated: number;
  /** Sandboxes still running or paused in memory, and claims still being made. */
  remaining: number;
  /** Sandboxes the drain gave up on after MAX_ATTEMPTS (still running): their ids and the last error. */
  failed: Array<{ id: string; error: string }>;
  /**
   * Hibernated sandboxes whose hibernation record is published for peers to copy (`--checkpoint-replicas` > 1,
   * docs/placement.md "Resume anywhere"): those can resume on another node once this one is gone.
   */
  portable: number;
  /**
   * Of those, the ones whose record has as many copies as wanted (`--checkpoint-replicas`, or the fleet's size when
   * smaller) at the replicator's last count: they survive this node's disk.
   */
  copied: number;
  /** Nothing remains to hibernate (failed ones aside). */
  done: boolean;
}

interface Saved {
  /** When the operator's drain started, if it holds. */
  api?: string;
  /** Sandboxes this drain hibernated from running: woken at the undrain. */
  wake: string[];
}

export class NodeDrain implements ClaimAdmission {
  private readonly engine: NodeEngine;
  private readonly log: Logger;
  private readonly file: string;
  private readonly concurrency: number;
  /** Reason → since when. */
  private readonly reasons = new Map<string, string>();
  private readonly toWake = new Set<string>();
  private readonly failures = new Map<string, { error: string; attempts: number }>();
  private since: string | undefined;
  private hibernatedCount = 0;
  private done = false;
  private working: Promise<void> | undefined;
  private again = false;
  private closed = false;
  /**
   * The replicator's last count of a checkpoint's copies (unset: the node does not replicate). Set after
   * construction: the drain is restored before the placement layer exists, so no first claim slips past it.
   */
  copiesOf: ((checkpoint: string) => Copies | undefined) | undefined;

  constructor(opts: DrainOptions) {
    this.engine = opts.engine;
    this.log = (opts.logger ?? silentLogger).child({ component: 'drain' });
    this.file = join(opts.dataDir, 'drain.json');
    this.concurrency = Math.max(1, opts.concurrency ?? DRAIN_CONCURRENCY);
  }

  /** Pick up a drain the operator asked for before a restart (and what its undrain wakes); call after engine.start(). */
  restore(): void {
    let saved: Partial<Saved> | null;
    try {
      saved = JSON.parse(readFileSync(this.file, 'utf8')) as Partial<Saved> | null;
    } catch {
      return; // never drained, or an unreadable file: not draining (a cordon is read again from the Node)
    }
    if (typeof saved !== 'object' || saved === null) return;
    for (const id of Array.isArray(saved.wake) ? saved.wake : []) if (typeof id === 'string') this.toWake.add(id);
    if (typeof saved.api === 'string') this.start(API_REASON, saved.api);
    else if (this.toWake.size) this.kick(); // undrained while down: wake them now
  }

  get active(): boolean {
    return this.reasons.size > 0;
  }

  /** Start draining for `reason` (idempotent per reason). */
  start(reason: string, since = new Date().toISOString()): DrainStatus {
    const first = !this.active;
    if (!this.reasons.has(reason)) this.reasons.set(reason, since);
    if (first) {
      this.since = since;
      this.hibernatedCount = 0;
      this.done = false;
      this.failures.clear();
      this.engine.setAdmission(this);
      this.log.info({ reason, claims: this.engine.claimedCount }, 'draining: new claims and wakes refused');
    } else this.log.info({ reason, reasons: [...this.reasons.keys()] }, 'drain asked again');
    this.save();
    this.kick();
    return this.status();
  }

  /** `reason` no longer holds; the last one gone undrains the node. */
  stop(reason: string): DrainStatus | undefined {
    if (!this.reasons.delete(reason)) return this.active ? this.status() : undefined;
    if (this.active) {
      this.log.info({ reason, still: [...this.reasons.keys()] }, 'a drain reason ended; still draining');
      this.save();
      return this.status();
    }
    this.since = undefined;
    this.engine.setAdmission(undefined);
    this.log.info({ reason, toWake: this.toWake.size }, 'undrained: claims admitted again');
    this.save();
    this.kick();
    return undefined;
  }

  /** Stop working (shutdown); the state on disk stays. */
  close(): Promise<void> {
    this.closed = true;
    return this.working ?? Promise.resolve();
  }

  // ------------------------------------------------------------------ ClaimAdmission (the engine's gate)

  assertClaim(): void {
    throw new SandboxError(
      'sandboxd.draining',
      `node ${this.engine.nodeName} is draining since ${this.since}: it makes no new sandbox`,
      { hint: 'claim on another node; this one takes claims again once it is undrained (DELETE /v1/drain, uncordon)' },
    );
  }

  assertWake(id: string): void {
    throw new SandboxError(
      'sandboxd.draining',
      `node ${this.engine.nodeName} is draining since ${this.since}: sandbox ${id} stays hibernated on it`,
      { hint: 'resume it once the node is undrained (DELETE /v1/drain, uncordon); nothing of it is lost meanwhile' },
    );
  }

  summary(): string {
    const s = this.status();
    return `since ${s.since} (${s.reasons.join(', ')}): ${s.hibernated} hibernated, ${s.remaining} remaining, ${s.failed.length} failed`;
  }

  // ------------------------------------------------------------------ progress

  status(): DrainStatus {
    const failed = [...this.failures].filter(([, f]) => f.attempts >= MAX_ATTEMPTS);
    return {
      since: this.since ?? '',
      reasons: [...this.reasons.keys()].sort(),
      hibernated: this.hibernatedCount,
      remaining: this.pendingRecords().length + this.engine.claimsInFlight,
      failed: failed.map(([id, f]) => ({ id, error: f.error })),
      ...this.records(),
      done: this.done,
    };
  }

  /** How many hibernated sandboxes have a hibernation record, and how many of those have all its copies. */
  private records(): { portable: number; copied: number } {
    let portable = 0;
    let copied = 0;
    for (const r of this.engine.list()) {
      if (!r.hibernated || r.hibernationCheckpoint === undefined) continue;
      portable++;
      const c = this.copiesOf?.(r.hibernationCheckpoint);
      if (c && c.want > 1 && c.nodes.length >= c.want) copied++;
    }
    return { portable, copied };
  }

  /** Sandboxes left to wake after an undrain (0 while draining). */
  get waking(): number {
    return this.active ? 0 : this.toWake.size;
  }

  /** Claims not on disk yet that the drain has not given up on. */
  private pendingRecords(): SandboxRecord[] {
    return this.engine.list().filter((r) => !r.hibernated && (this.failures.get(r.id)?.attempts ?? 0) < MAX_ATTEMPTS);
  }

  // ------------------------------------------------------------------ the work loop

  /** One loop at a time; a change of state meanwhile makes it look again. */
  private kick(): void {
    if (this.working) {
      this.again = true;
      return;
    }
    this.working = this.work()
      .catch((err: unknown) => this.log.error({ err }, 'drain loop failed; it runs again at the next change'))
      .finally(() => {
        this.working = undefined;
        if (this.again && !this.closed) {
          this.again = false;
          this.kick();
        }
      });
  }

  /** Level-triggered: draining, hibernate until nothing runs; undrained, wake what the drain put to sleep. */
  private async work(): Promise<void> {
    while (!this.closed) {
      this.again = false;
      if (this.active) {
        const batch = this.pendingRecords().slice(0, this.concurrency);
        if (batch.length === 0) {
          // Claims admitted before the gate are still being made: they are hibernated once they exist.
          if (this.engine.claimsInFlight > 0) {
            await sleep(100);
            continue;
          }
          if (!this.done) {
            this.done = true;
            this.log.info(this.status(), 'drain done: every sandbox is hibernated');
          }
          return;
        }
        const results = await Promise.all(batch.map((r) => this.hibernateOne(r)));
        if (results.includes(false)) await sleep(1000); // a failure: not again at once
      } else {
        const batch = [...this.toWake].slice(0, this.concurrency);
        if (batch.length === 0) return;
        await Promise.all(batch.map((id) => this.wakeOne(id)));
      }
    }
  }

  private async hibernateOne(rec: SandboxRecord): Promise<boolean> {
    const wasRunning = !rec.paused;
    try {
      await this.engine.hibernate(rec.id);
    } catch (err) {
      if (this.engine.get(rec.id) !== rec) return true; // released meanwhile: nothing to keep
      const f = this.failures.get(rec.id) ?? { error: '', attempts: 0 };
      f.attempts++;
      f.error = err instanceof Error ? err.message : String(err);
      this.failures.set(rec.id, f);
      this.log.warn(
        { err, sandbox: rec.id, claimRef: rec.claimRef, attempt: f.attempts, of: MAX_ATTEMPTS },
        f.attempts >= MAX_ATTEMPTS ? 'drain: hibernate failed; leaving the sandbox running' : 'drain: hibernate failed',
      );
      return false;
    }
    // On disk before it counts: a drain is for taking the node down, and a crash must find it hibernated (the engine
    // writes a hibernate's record within 20 ms, not before answering).
    await this.engine
      .saveState()
      .catch((err: unknown) => this.log.warn({ err }, 'drain: writing the state file failed; the engine retries it'));
    this.hibernatedCount++;
    if (wasRunning) this.toWake.add(rec.id);
    this.save();
    const { hibernated, remaining } = this.status();
    this.log.info({ sandbox: rec.id, claimRef: rec.claimRef, hibernated, remaining }, 'drain: sandbox hibernated');
    return true;
  }

  private async wakeOne(id: string): Promise<void> {
    const rec = this.engine.get(id);
    // A handed-off sandbox (its Pod was evicted, vk/pod-lifecycle.ts) waits for its replacement Pod: that one wakes
    // it here, or resumes its record elsewhere.
    if (rec?.hibernated && !rec.handedOff) {
      try {
        await this.engine.wake(id);
        this.log.info({ sandbox: id, claimRef: rec.claimRef, left: this.toWake.size - 1 }, 'undrain: sandbox woken');
      } catch (err) {
        if (this.active) return; // drained again meanwhile: it stays hibernated, and in the set
        // Left hibernated, listed and resumable by its owner (as after a pause): a wake that failed is not retried.
        this.log.warn({ err, sandbox: id }, 'undrain: waking a sandbox failed; it stays hibernated until resumed');
      }
    }
    this.toWake.delete(id);
    this.save();
  }

  private save(): void {
    const saved: Saved = {
      ...(this.reasons.has(API_REASON) ? { api: this.reasons.get(API_REASON) } : {}),
      wake: [...this.toWake],
    };
    try {
      writeFileSync(`${this.file}.tmp`, JSON.stringify(saved), { mode: 0o600 });
      renameSync(`${this.file}.tmp`, this.file);
    } catch (err) {
      // The drain holds in memory; only a restart would forget it (and the undrain's wakes).
      this.log.warn({ err, file: this.file }, 'could not record the drain state; it holds until a restart');
    }
  }
}
