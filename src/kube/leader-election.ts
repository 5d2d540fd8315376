import { deadline } from '../abort.js';
import { hostname } from 'node:os';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { SandboxError } from '../errors.js';
import { silentLogger, type Logger } from '../log/logger.js';
import type { KubeClient } from './client.js';
import { Leases, type KubeObject } from './resource.js';
import { isAlreadyExists, isConflict, isNotFound } from './status-errors.js';

/**
 * Leader election on a coordination.k8s.io/v1 Lease with client-go's rules and timings (tools/leaderelection):
 *
 * - A standby never reads the holder's timestamps: it takes over only after `leaseDuration` has passed on its own
 *   clock since it last saw the record change. Clock offsets between machines therefore cannot shorten a lease.
 * - The leader counts its term from the moment it *sent* its last successful renewal (no standby can have seen the
 *   record earlier), and every renewal is aborted at `renewDeadline` from then. It gives up at that point, a full
 *   `leaseDuration - renewDeadline` before any standby may take over, however the apiserver link misbehaves.
 * - Errors while standing by are retried; only the leader's renew deadline ends anything.
 *
 * The client should be the elector's own, unthrottled one (the manager makes it): a renewal must not queue behind
 * the controllers' requests.
 */
export interface LeaderElectionOptions {
  namespace: string;
  name: string;
  identity?: string;
  leaseDurationMs?: number;
  renewDeadlineMs?: number;
  retryPeriodMs?: number;
  logger?: Logger;
  /**
   * Milliseconds since the epoch, for the Lease's timestamps and every local duration. Default: a monotonic clock
   * anchored at process start, so a step of the wall clock cannot stretch or shorten a term. Tests inject skew.
   */
  clock?: () => number;
}

/** coordination.k8s.io/v1 Lease. */
export interface Lease extends KubeObject {
  spec?: {
    holderIdentity?: string;
    leaseDurationSeconds?: number;
    acquireTime?: string;
    renewTime?: string;
    leaseTransitions?: number;
  };
}

/** client-go's JitterFactor: a standby retries after retryPeriod × [1, 2.2). */
const JITTER = 1.2;
const monotonic = () => performance.timeOrigin + performance.now();
const microTime = (ms: number) => new Date(ms).toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');

export class LeaderElector {
  readonly identity: string;
  private readonly log: Logger;
  private readonly leaseDurationMs: number;
  private readonly renewDeadlineMs: number;
  private readonly retryPeriodMs: number;
  private readonly now: () => number;
  /** The record as last seen, and when (our clock): the only inputs to "has it expired". */
  private observed: { spec: string; holder: string; durationMs: number; at: number } | undefined;
  /** The Lease as we last wrote it (its resourceVersion guards the leader's fast path and release()). */
  private written: Lease | undefined;
  /** When the last successful write of ours was sent; our term ends renewDeadline after it. */
  private renewedAt = -Infinity;

  constructor(
    private readonly client: KubeClient,
    private readonly opts: LeaderElectionOptions,
  ) {
    // The pid lets a local supervisor (tests, benches) tell which of its processes holds the lease.
    this.identity = opts.identity ?? `${hostname()}_${process.pid}_${randomUUID()}`;
    this.log = (opts.logger ?? silentLogger).child({ lease: `${opts.namespace}/${opts.name}` });
    this.leaseDurationMs = opts.leaseDurationMs ?? 15_000;
    this.renewDeadlineMs = opts.renewDeadlineMs ?? 10_000;
    this.retryPeriodMs = opts.retryPeriodMs ?? 2_000;
    this.now = opts.clock ?? monotonic;
    if (this.leaseDurationMs % 1000 !== 0 || this.leaseDurationMs <= this.renewDeadlineMs)
      throw new SandboxError(
        'kube.leader-election',
        `lease duration ${this.leaseDurationMs} ms must be whole seconds and longer than the renew deadline ${this.renewDeadlineMs} ms`,
        { hint: 'use client-go defaults: lease 15 s, renew deadline 10 s, retry period 2 s' },
      );
    if (this.renewDeadlineMs <= JITTER * this.retryPeriodMs)
      throw new SandboxError(
        'kube.leader-election',
        `renew deadline ${this.renewDeadlineMs} ms must exceed ${JITTER} × the retry period ${this.retryPeriodMs} ms`,
        { hint: 'use client-go defaults: lease 15 s, renew deadline 10 s, retry period 2 s' },
      );
  }

  /** True while this process holds the lease and its term has not run out. */
  get isLeader(): boolean {
    return this.observed?.holder === this.identity && this.now() < this.renewedAt + this.renewDeadlineMs;
  }

  /** Resolves true once this process holds the lease, false if the signal aborted first. */
  async acquire(signal: AbortSignal): Promise<boolean> {
    while (!signal.aborted) {
      const attempt = deadline(this.renewDeadlineMs, signal);
      try {
        if (await this.tryAcquireOrRenew(attempt.signal)) {
          this.log.info({ identity: this.identity }, 'acquired leadership');
          return true;
        }
      } catch (err) {
        if (signal.aborted) break;
        this.log.warn({ err }, 'could not read or write the leader Lease; retrying (standing by)');
      } finally {
        attempt.clear();
      }
      await sleep(this.retryPeriodMs * (1 + Math.random() * JITTER), undefined, { signal }).catch(() => {});
    }
    return false;
  }

  /**
   * Renews every retry period until the signal aborts (resolves false: still ours, see release()) or the term runs
   * out without a successful renewal, or another holder is seen (resolves true: leadership lost; the caller must
   * stop everything the lease guards at once).
   */
  async hold(signal: AbortSignal): Promise<boolean> {
    for (;;) {
      await sleep(this.retryPeriodMs, undefined, { signal }).catch(() => {});
      if (signal.aborted) return false;
      for (;;) {
        const left = this.renewedAt + this.renewDeadlineMs - this.now();
        if (left <= 0) {
          this.log.error({ renewDeadlineMs: this.renewDeadlineMs }, 'lost leadership: no renewal within the deadline');
          return true;
        }
        const attempt = deadline(Math.ceil(left), signal);
        try {
          if (await this.tryAcquireOrRenew(attempt.signal)) break;
          if (this.observed && this.observed.holder !== this.identity) {
            this.log.error({ holder: this.observed.holder }, 'lost leadership: the lease has another holder');
            return true;
          }
        } catch (err) {
          if (signal.aborted) return false;
          this.log.warn({ err }, 'lease renewal failed; retrying until the renew deadline');
        } finally {
          attempt.clear();
        }
        if (signal.aborted) return false;
        const wait = Math.min(this.retryPeriodMs, this.renewedAt + this.renewDeadlineMs - this.now());
        if (wait > 0) await sleep(wait, undefined, { signal }).catch(() => {});
        if (signal.aborted) return false;
      }
    }
  }

  /**
   * Give the lease up (holder cleared, 1 s duration) so a standby takes over at once. Call only after everything
   * the lease guards has stopped. A no-op unless our term is still running; guarded by the resourceVersion we
   * wrote, so it never clears a record someone else has written since.
   */
  async release(): Promise<void> {
    if (!this.isLeader || !this.written) return;
    const now = microTime(this.now());
    const spec = this.written.spec ?? {};
    await this.client.update(
      Leases,
      {
        ...this.written,
        spec: {
          holderIdentity: '',
          leaseDurationSeconds: 1,
          acquireTime: now,
          renewTime: now,
          leaseTransitions: spec.leaseTransitions ?? 0,
        },
      },
      { signal: AbortSignal.timeout(this.renewDeadlineMs) },
    );
    this.written = undefined;
    this.renewedAt = -Infinity;
    this.log.info('released leadership');
  }

  private async tryAcquireOrRenew(signal: AbortSignal): Promise<boolean> {
    // Fast path (client-go's): the leader overwrites the record it last wrote without reading it first.
    if (this.written && this.isLeader) {
      try {
        if (await this.write(this.written, true, signal)) return true;
      } catch (err) {
        if (signal.aborted) throw err;
        this.log.debug({ err }, 'optimistic renewal failed; reading the Lease');
      }
    }
    let lease: Lease;
    try {
      lease = await this.client.get<Lease>(Leases, this.opts.namespace, this.opts.name, undefined, { signal });
    } catch (err) {
      if (!isNotFound(err)) throw err;
      const fresh: Lease = {
        apiVersion: 'coordination.k8s.io/v1',
        kind: 'Lease',
        metadata: { name: this.opts.name, namespace: this.opts.namespace },
      };
      return this.write(fresh, false, signal, true);
    }
    // Seen now, not when the GET was sent: the later time can only make a standby wait longer.
    const seen = this.now();
    this.observe(lease, seen);
    const spec = lease.spec ?? {};
    const ours = spec.holderIdentity === this.identity;
    const expired = this.observed!.at + this.observed!.durationMs <= seen;
    if (spec.holderIdentity && !ours && !expired) return false;
    return this.write(lease, ours, signal);
  }

  /** Write our record over `lease`; true on success, false when someone else wrote first. */
  private async write(lease: Lease, renewal: boolean, signal: AbortSignal, create = false): Promise<boolean> {
    const sentAt = this.now();
    const old = lease.spec ?? {};
    const spec: NonNullable<Lease['spec']> = {
      holderIdentity: this.identity,
      leaseDurationSeconds: this.leaseDurationMs / 1000,
      acquireTime: renewal ? (old.acquireTime ?? microTime(sentAt)) : microTime(sentAt),
      renewTime: microTime(sentAt),
      leaseTransitions: (old.leaseTransitions ?? 0) + (renewal || create ? 0 : 1),
    };
    let written: Lease;
    try {
      written = create
        ? await this.client.create<Lease>(Leases, { ...lease, spec }, { signal })
        : await this.client.update<Lease>(Leases, { ...lease, spec }, { signal });
    } catch (err) {
      if (isConflict(err) || isAlreadyExists(err)) return false;
      throw err;
    }
    this.written = written;
    this.renewedAt = sentAt;
    this.observe(written, sentAt);
    return true;
  }

  private observe(lease: Lease, at: number): void {
    const spec = JSON.stringify(lease.spec ?? {});
    if (this.observed?.spec === spec) return;
    this.observed = {
      spec,
      holder: lease.spec?.holderIdentity ?? '',
      durationMs: (lease.spec?.leaseDurationSeconds ?? this.leaseDurationMs / 1000) * 1000,
      at,
    };
  }
}
