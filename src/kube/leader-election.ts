import { hostname } from 'node:os';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { silentLogger, type Logger } from '../log/logger.js';
import type { KubeClient } from './client.js';
import { Leases, type KubeObject } from './resource.js';
import { isAlreadyExists, isConflict, isNotFound } from './status-errors.js';

/** Leader election on a coordination.k8s.io/v1 Lease, with client-go's timings. */
export interface LeaderElectionOptions {
  namespace: string;
  name: string;
  identity?: string;
  leaseDurationMs?: number;
  renewDeadlineMs?: number;
  retryPeriodMs?: number;
  logger?: Logger;
}

interface Lease extends KubeObject {
  spec?: {
    holderIdentity?: string;
    leaseDurationSeconds?: number;
    acquireTime?: string;
    renewTime?: string;
    leaseTransitions?: number;
  };
}

export class LeaderElector {
  readonly identity: string;
  private readonly log: Logger;
  private readonly leaseDurationMs: number;
  private readonly renewDeadlineMs: number;
  private readonly retryPeriodMs: number;

  constructor(
    private readonly client: KubeClient,
    private readonly opts: LeaderElectionOptions,
  ) {
    this.identity = opts.identity ?? `${hostname()}_${randomUUID()}`;
    this.log = (opts.logger ?? silentLogger).child({ lease: `${opts.namespace}/${opts.name}` });
    this.leaseDurationMs = opts.leaseDurationMs ?? 15_000;
    this.renewDeadlineMs = opts.renewDeadlineMs ?? 10_000;
    this.retryPeriodMs = opts.retryPeriodMs ?? 2_000;
  }

  /** Resolves once this process holds the lease. */
  async acquire(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      if (await this.tryAcquireOrRenew()) {
        this.log.info({ identity: this.identity }, 'acquired leadership');
        return;
      }
      await sleep(this.retryPeriodMs, undefined, { signal }).catch(() => {});
    }
  }

  /** Renew until the signal aborts; calls onLost (and stops) if renewal fails past the renew deadline. */
  async holdUntil(signal: AbortSignal, onLost: () => void): Promise<void> {
    let lastRenew = Date.now();
    while (!signal.aborted) {
      await sleep(this.retryPeriodMs, undefined, { signal }).catch(() => {});
      if (signal.aborted) break;
      if (await this.tryAcquireOrRenew().catch(() => false)) lastRenew = Date.now();
      else if (Date.now() - lastRenew > this.renewDeadlineMs) {
        this.log.error('lost leadership');
        onLost();
        return;
      }
    }
    await this.release().catch(() => {});
  }

  private async tryAcquireOrRenew(): Promise<boolean> {
    const now = new Date();
    const nowIso = now.toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');
    let lease: Lease;
    try {
      lease = await this.client.get<Lease>(Leases, this.opts.namespace, this.opts.name);
    } catch (err) {
      if (!isNotFound(err)) throw err;
      try {
        await this.client.create<Lease>(Leases, {
          apiVersion: 'coordination.k8s.io/v1',
          kind: 'Lease',
          metadata: { name: this.opts.name, namespace: this.opts.namespace },
          spec: {
            holderIdentity: this.identity,
            leaseDurationSeconds: Math.round(this.leaseDurationMs / 1000),
            acquireTime: nowIso,
            renewTime: nowIso,
            leaseTransitions: 0,
          },
        });
        return true;
      } catch (e) {
        if (isAlreadyExists(e)) return false;
        throw e;
      }
    }
    const spec = lease.spec ?? {};
    const held = spec.holderIdentity && spec.holderIdentity !== this.identity;
    const renewed = spec.renewTime ? Date.parse(spec.renewTime) : 0;
    const expired = renewed + (spec.leaseDurationSeconds ?? 15) * 1000 < now.getTime();
    if (held && !expired) return false;
    const transitions = (spec.leaseTransitions ?? 0) + (spec.holderIdentity === this.identity ? 0 : 1);
    lease.spec = {
      holderIdentity: this.identity,
      leaseDurationSeconds: Math.round(this.leaseDurationMs / 1000),
      acquireTime: spec.holderIdentity === this.identity ? (spec.acquireTime ?? nowIso) : nowIso,
      renewTime: nowIso,
      leaseTransitions: transitions,
    };
    try {
      await this.client.update(Leases, lease);
      return true;
    } catch (err) {
      if (isConflict(err)) return false;
      throw err;
    }
  }

  private async release(): Promise<void> {
    const lease = await this.client.get<Lease>(Leases, this.opts.namespace, this.opts.name);
    if (lease.spec?.holderIdentity !== this.identity) return;
    lease.spec = { ...lease.spec, holderIdentity: '', leaseDurationSeconds: 1 };
    await this.client.update(Leases, lease);
  }
}
