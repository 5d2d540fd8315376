/**
 * The node engine's options and the shapes its callers pass (engine.ts): what a claim asks for, a fork child's
 * identity, what a drain refuses, and the defaults the flags name.
 */
import { MAX_FORK_COUNT } from '../api/index.js';
import type { VmNetworkPolicy } from '../api/vm-network.js';
import { createHash } from 'node:crypto';
import { join, resolve } from 'node:path';
import type { Logger } from '../log/logger.js';
import type { MicrovmDriver } from '../vmm/index.js';
import {
  DEFAULT_CHECKPOINT_TTL_HOURS,
  DEFAULT_MAX_CHECKPOINTS,
  DEFAULT_MAX_CHECKPOINTS_PER_NAMESPACE,
} from './checkpoints.js';
import type { ClaimOptions, ExpiryAction } from './claims.js';
import type { PoolKey } from './pool-key.js';

export interface EngineOptions {
  dataDir: string;
  nodeName: string;
  advertiseAddr: string;
  /** The VMM (default: QEMU microVMs; `SimulatedMicrovmDriver` for `sandboxd --engine=sim`). */
  driver?: MicrovmDriver;
  /** Most running claimed sandboxes at once (hibernated ones excluded); beyond it claims and wakes get 429. */
  maxClaims?: number;
  /**
   * Most hibernated sandboxes kept besides the running ones (they hold disk, not RAM or a running slot): a claim
   * beyond `maxClaims + maxSuspended` claims in all gets 429. Default DEFAULT_MAX_SUSPENDED.
   */
  maxSuspended?: number;
  /** Guest CPU (% of one host core) above which a sandbox counts as in use for its idle policy (idle.ts). */
  idleCpuPercent?: number;
  /**
   * Publish each hibernation's saved state as a checkpoint of kind `hibernation` (copied to peers by the
   * replicator), so the sandbox can resume on another node (docs/placement.md "Resume anywhere"). Default false.
   */
  portableHibernation?: boolean;
  /** Clones made in parallel while refilling. */
  refillConcurrency?: number;
  /** Wait after a claim before refilling (bursts are served first; spawning QEMU blocks the loop). */
  refillDelayMs?: number;
  /** Spare VMMs per template (see QemuDriverOptions.spareVmms); used when the engine makes its own driver. */
  spareVmms?: number;
  /** Egress lane: the CIDR of the VMs' veth /30s and the guests' resolver (QemuDriverOptions), when the engine makes its own driver. */
  vmNetworkCidr?: string;
  vmResolver?: string;
  /**
   * Run one command (the template's prime command, src/guest/images.ts: a login shell where there is bash, as e2b's
   * SDK runs one for every command; else `true`) and one JSON request (a stat of `/`) in each warm VM once the refill is done, before a
   * tenant gets it. Under TCG a fresh clone's QEMU has translated none of the guest's exec path yet, so its first
   * command pays ~0.2 s for that, and its first JSON request (files, port-forward, signals) ~25 ms more for the
   * agent's JSON path, which exec no longer takes (binary EXEC frame); priming pays both in the background, and
   * claims take primed VMs first. Default true.
   */
  primeWarmVms?: boolean;
  defaultTtlSeconds?: number;
  maxTtlSeconds?: number;
  /** Checkpoints older than this are deleted (0: kept until deleted). Default DEFAULT_CHECKPOINT_TTL_HOURS. */
  checkpointTtlMs?: number;
  /**
   * Most checkpoints this node keeps (its own and pulled copies); a checkpoint beyond is 429. A sandbox's token may
   * checkpoint it, each one a copy of its RAM on disk: without a bound one tenant fills the node's disk. 0: none.
   */
  maxCheckpoints?: number;
  /** Most checkpoints of one namespace (or tenant) on this node; beyond is 403 (checkpoints.ts). 0: none. */
  maxCheckpointsPerNamespace?: number;
  /**
   * Sync the claim table to disk before a claim is answered (default true). False: written to the kernel only, so a
   * claim survives a crash of sandboxd but not of the machine (`--fsync=false`, the local platform's `--no-fsync`).
   */
  fsync?: boolean;
  /** Cap in MiB on the files a filesystem pause saves (files-pause.ts); 0, the default: the sandbox's memory size. */
  maxLayerMiB?: number;
  logger?: Logger;
  /** VM run dirs (sockets, logs). Default: under /run when root (QEMU drops to an unprivileged user that must
   * reach them, and unix socket paths are short there), else `<dataDir>/vms`. */
  runRoot?: string;
}

export { DEFAULT_MAX_CHECKPOINTS, DEFAULT_MAX_CHECKPOINTS_PER_NAMESPACE, DEFAULT_CHECKPOINT_TTL_HOURS };

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
  /** The tenant claiming (API tenants); only it lists the claim. */
  tenant?: string;
  /** Provision a dedicated VM when the pool is empty (default true). */
  provisionOnMiss?: boolean;
  /** The Kubernetes object the claim is (sandbox-apiserver's creates); stored and returned in rows. */
  object?: unknown;
  /** At the lease's end, hibernate (or keep the files only) instead of release. */
  onExpiry?: ExpiryAction;
  /** Hibernate after this many seconds without use; the next request wakes it (idle.ts). */
  idleHibernateSeconds?: number;
  /** Set by the node's claim gateway only (SandboxRecord.gatewayDelivery). */
  gatewayDelivery?: ClaimOptions['gatewayDelivery'];
  /**
   * Prime a provisioned VM after handing it out (see EngineOptions.primeWarmVms), for holders that keep a VM idle
   * until someone else uses it, like a virtual-kubelet pod in a warm pool. Off for API tenants, who would see a
   * command they did not run.
   */
  primeAfter?: boolean;
  /** Egress lane: the policy to enforce, applied before the claim is answered (absent: the secure default). */
  network?: VmNetworkPolicy;
}

/** The most children one fork makes (the node's limit; the API answers 400 above it), the same for every API. */
export { MAX_FORK_COUNT };

/** A fork child's identity when the caller gives one (sandbox-apiserver: the child Sandbox's object). */
export interface ForkChild {
  claimRef: string;
  object: unknown;
}

/**
 * The claimRefs a claim must hold alone: a Kubernetes object's name is unique among live claims (docs/sandboxd-api.md
 * "Claims": a second claim of a live claim_ref is 409); a claim_ref without an object is only a label.
 */
export function uniqueRefs(req: { claimRef?: string; object?: unknown }): string[] {
  return req.claimRef && req.object !== undefined ? [req.claimRef] : [];
}

/** What a drain refuses (drain.ts NodeDrain): each assert throws the error to answer. */
export interface ClaimAdmission {
  assertClaim(): void;
  assertWake(id: string): void;
  /** One line for logs and the NodeInventory annotation: since when, and the progress. */
  summary(): string;
}

/** The default of `--max-suspended`: hibernated sandboxes cost disk (their guest's used memory), not RAM. */
export const DEFAULT_MAX_SUSPENDED = 1000;
