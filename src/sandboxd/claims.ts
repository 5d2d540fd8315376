import { randomBytes } from 'node:crypto';
import type { VmNetworkPolicy } from '../api/vm-network.js';
import { SandboxError } from '../errors.js';
import type { PoolKey } from './pool-key.js';

/**
 * The node's claim table: one record per claimed sandbox (its VM, token and lease), indexed by id and by the
 * claimRef its holder gave. Records are plain JSON; the engine persists them (state-file.ts).
 */

export interface SandboxRecord {
  id: string;
  token: string;
  key: PoolKey;
  vmId: string;
  claimRef?: string;
  /** The tenant that claimed it (tenant token); only that tenant lists it. Absent for operator claims. */
  tenant?: string;
  claimedAt: string;
  deadline: string;
  hibernated: boolean;
  /** Memory-resident pause (QMP stop): frozen vCPUs, RAM kept. */
  paused?: boolean;
  fromCheckpoint?: string;
  /** How the claim was served: warm pop or on-demand clone. */
  source: 'warm' | 'provisioned' | 'fork' | 'checkpoint';
  /**
   * The Kubernetes object this claim is (a Sandbox created through sandbox-apiserver: its metadata and spec),
   * kept opaque and returned in rows, so the aggregated API serves it truthfully without etcd.
   */
  object?: unknown;
  /** The node's change counter at this record's last change (docs/sandboxd-api.md "Change feed"). */
  rv?: number;
  /** At the lease's end: hibernate, or keep its files only, instead of release (then kept for the longest lease). */
  onExpiry?: ExpiryAction;
  /** Idle policy: hibernate after this many seconds without use, wake on the next request (idle.ts). */
  idleHibernateSeconds?: number;
  /** Hibernated by its idle policy (not by a caller): the next request wakes it. */
  idleSuspended?: boolean;
  /**
   * While hibernated on a node that replicates: the checkpoint its saved state was published as (kind
   * `hibernation`), copied to peers, from which another node can resume it (docs/placement.md "Resume anywhere").
   */
  hibernationCheckpoint?: string;
  /**
   * Its Pod was evicted while the node drained and the claim stays here hibernated, for the replacement Pod to resume
   * from its hibernation record on whichever node it lands (vk/pod-handoff.ts); released when that record is
   * consumed (deleted by the peer that resumed it), adopted again if the replacement lands here.
   */
  handedOff?: true;
  /** This claim is a sandbox resumed here from a hibernation record: the node and claim it was before. */
  resumedFrom?: { node: string; claimId: string };
  /**
   * Paused with its files only (files-pause.ts): no VM (`vmId` names the destroyed one), its writable layer saved on
   * the node's disk; `hibernated` is true too, so every reader treats it as not running. Resume boots a fresh VM.
   */
  filesOnly?: true;
  /** The saved layer's size in bytes, while `filesOnly`. */
  layerBytes?: number;
  /** The VM's size as the node gave it (vCPUs, memory), for readers that report it (the e2b API). */
  vcpus?: number;
  memoryMiB?: number;
  /** When the record last changed (its phase, its lease). */
  updatedAt?: string;
  /**
   * Set by this node's claim gateway on the claims it made itself (gateway/index.ts), and by nothing else: what
   * makes a claim a gateway delivery that the record and orphan adoption act on (with sandboxd's cluster-wide
   * rights). Never read from the object's annotations, which whoever gives an object writes.
   */
  gatewayDelivery?: GatewayDeliveryFact;
  /**
   * Egress lane: the policy its VM enforces (network-policy.ts); absent = the secure default. Kept here (the state
   * file) as well as in the VM's record, so a restarted daemon reports what the VM enforces.
   */
  network?: VmNetworkPolicy;
}

/**
 * A claim's phase as the node reports it: `Suspended` is hibernated by its idle policy (the next request wakes it,
 * so readers such as e2b's API report it running); `Hibernated` and `Paused` wait for a caller's resume.
 */
export function phaseOf(rec: SandboxRecord): 'Running' | 'Paused' | 'Hibernated' | 'Suspended' {
  if (rec.hibernated) return rec.idleSuspended ? 'Suspended' : 'Hibernated';
  return rec.paused ? 'Paused' : 'Running';
}

/**
 * A claim's lease-end action instead of release (`on_expiry`): `hibernate` (memory to disk), or `pause-filesystem`
 * (its files only, files-pause.ts; e2b's onTimeout {action: 'pause', keepMemory: false}).
 */
export type ExpiryAction = 'hibernate' | 'pause-filesystem';

/** What the claim gateway knew when it made a claim (docs/claim-gateway.md "What a claim is"). */
export interface GatewayDeliveryFact {
  namespace: string;
  name: string;
  warmPool: string;
  template: string;
  /** The Kubernetes user the claim was authorized for. */
  user: string;
}

/** What the claimant chose: lease (default and cap from the engine), claimRef, and who it is. */
export interface ClaimOptions {
  ttlSeconds?: number;
  claimRef?: string;
  tenant?: string;
  /** The Kubernetes object the claim is (sandbox-apiserver's creates); stored and returned in rows. */
  object?: unknown;
  onExpiry?: ExpiryAction;
  /** Idle policy (SandboxRecord.idleHibernateSeconds). */
  idleHibernateSeconds?: number;
  /** SandboxRecord.resumedFrom. */
  resumedFrom?: { node: string; claimId: string };
  /** The claimed VM's size. */
  vcpus?: number;
  memoryMiB?: number;
  /** The checkpoint the VM was cloned from. */
  fromCheckpoint?: string;
  /** Only the node's claim gateway sets it (SandboxRecord.gatewayDelivery). */
  gatewayDelivery?: GatewayDeliveryFact;
  /** The egress policy to enforce (egress lane; the engine applies it before the claim is answered). */
  network?: VmNetworkPolicy;
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

export class ClaimRecords {
  private readonly claims = new Map<string, SandboxRecord>();
  private readonly byClaimRef = new Map<string, string>();
  /**
   * claimRefs of claims still being made (a clone, a fork, a checkpoint's clone in flight): taken like a live
   * claim's, so a second claim of the same ref arriving meanwhile gets its 409 at once instead of a second VM.
   */
  private readonly reservedRefs = new Set<string>();
  /**
   * Counts changes; starts at the start time in microseconds, so a restarted daemon's counter is above every
   * value its previous run handed out and readers can order rows across restarts.
   */
  private counter = Date.now() * 1000;

  constructor(private readonly ttl: { defaultTtlSeconds: number; maxTtlSeconds: number }) {}

  get size(): number {
    return this.claims.size;
  }

  /** A new record for `vmId` (fresh id and token, lease from `ttlSeconds`), added to the table. */
  add(vmId: string, key: PoolKey, source: SandboxRecord['source'], opts: ClaimOptions): SandboxRecord {
    const { ttlSeconds, claimRef, tenant } = opts;
    const now = Date.now();
    const rec: SandboxRecord = {
      id: `sb_${random.take(8).toString('hex')}`,
      token: random.take(24).toString('base64url'),
      key,
      vmId,
      claimedAt: new Date(now).toISOString(),
      deadline: new Date(now + this.ttlMs(ttlSeconds)).toISOString(),
      hibernated: false,
      source,
      ...(claimRef ? { claimRef } : {}),
      ...(tenant ? { tenant } : {}),
      ...(opts.object !== undefined ? { object: opts.object } : {}),
      ...(opts.onExpiry ? { onExpiry: opts.onExpiry } : {}),
      ...(opts.idleHibernateSeconds ? { idleHibernateSeconds: opts.idleHibernateSeconds } : {}),
      ...(opts.resumedFrom ? { resumedFrom: opts.resumedFrom } : {}),
      ...(opts.vcpus ? { vcpus: opts.vcpus } : {}),
      ...(opts.memoryMiB ? { memoryMiB: opts.memoryMiB } : {}),
      ...(opts.fromCheckpoint ? { fromCheckpoint: opts.fromCheckpoint } : {}),
      ...(opts.gatewayDelivery ? { gatewayDelivery: opts.gatewayDelivery } : {}),
      ...(opts.network ? { network: opts.network } : {}),
    };
    this.touch(rec);
    this.restore(rec);
    return rec;
  }

  /** Note a change of `rec` (new counter value and time), for readers of the change feed. */
  touch(rec: SandboxRecord): void {
    rec.rv = ++this.counter;
    rec.updatedAt = new Date().toISOString();
  }

  /** The counter's current value (the version of the latest change). */
  get changeCounter(): number {
    return this.counter;
  }

  /** A change that is not a record's own (a release), numbered in the same sequence. */
  nextChange(): number {
    return ++this.counter;
  }

  /** Put back a record read from disk (or just made). */
  restore(rec: SandboxRecord): void {
    this.claims.set(rec.id, rec);
    if (rec.claimRef) this.byClaimRef.set(rec.claimRef, rec.id);
  }

  delete(rec: SandboxRecord): void {
    this.claims.delete(rec.id);
    if (rec.claimRef && this.byClaimRef.get(rec.claimRef) === rec.id) this.byClaimRef.delete(rec.claimRef);
  }

  clear(): void {
    this.claims.clear();
    this.byClaimRef.clear();
  }

  /** Move the lease's deadline to `ttlSeconds` from now (clamped like a claim's). */
  /** Move the lease to `ttlSeconds` from now (at most the longest lease); 0 ends it now. */
  extend(rec: SandboxRecord, ttlSeconds: number): void {
    rec.deadline = new Date(Date.now() + (ttlSeconds === 0 ? 0 : this.ttlMs(ttlSeconds))).toISOString();
    this.touch(rec);
  }

  private ttlMs(ttlSeconds: number | undefined): number {
    const s =
      !ttlSeconds || ttlSeconds <= 0 ? this.ttl.defaultTtlSeconds : Math.min(ttlSeconds, this.ttl.maxTtlSeconds);
    return s * 1000;
  }

  get(id: string): SandboxRecord | undefined {
    return this.claims.get(id);
  }

  /** Whether `claimRef` is a live claim's or one being made (reserveRefs). */
  refTaken(claimRef: string): boolean {
    return this.reservedRefs.has(claimRef) || this.byRef(claimRef) !== undefined;
  }

  /** 409 (sandboxd.conflict) unless `claimRef` is free: neither live nor being made. */
  assertRefFree(claimRef: string): void {
    if (this.refTaken(claimRef))
      throw new SandboxError('sandboxd.conflict', `claim_ref ${claimRef} is already claimed`);
  }

  /**
   * Take `refs` for claims about to be made, synchronously (call it before the first await of the claim): 409 if
   * any is taken, and then none is reserved. The returned function gives them back; call it once the records are
   * in the table (they hold the refs from then on) or the claim failed.
   */
  reserveRefs(refs: readonly string[]): () => void {
    for (const r of refs) this.assertRefFree(r);
    for (const r of refs) this.reservedRefs.add(r);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      for (const r of refs) this.reservedRefs.delete(r);
    };
  }

  byRef(claimRef: string): SandboxRecord | undefined {
    const id = this.byClaimRef.get(claimRef);
    return id ? this.claims.get(id) : undefined;
  }

  all(): SandboxRecord[] {
    return [...this.claims.values()];
  }
}
