/**
 * One served Sandbox as the server holds it: a compact, immutable record built from the owning node's row (its
 * change feed, or a claim answer), replaced whole on every change. Objects are materialized from it per response,
 * one at a time, so a Get costs the same at 50 sandboxes as at 500 000 (the reference system materialized every
 * sandbox of the fleet per Get).
 */
import {
  AGENTS_GROUP,
  CocoonAnnotationKeys,
  HUB_VERSION,
  type Sandbox,
  type SandboxSpec,
  kubeTime,
} from '../../api/index.js';
import type { PoolKeyOf } from '../../api/pool-key.js';
import type { OwnerReference } from '../../api/meta.js';
import type { VmNetworkPolicy } from '../../api/vm-network.js';

/** What a create stores on the node with the claim (sandboxd keeps it opaque, capped, and returns it in rows). */
export interface StoredObject {
  metadata: {
    name: string;
    namespace: string;
    uid: string;
    creationTimestamp: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
    ownerReferences?: OwnerReference[];
  };
  spec: SandboxSpec;
}

/** A sandboxd row (GET /v1/sandboxes, the change feed, a claim answer): docs/sandboxd-api.md. */
export interface NodeRow {
  id: string;
  key: PoolKeyOf;
  deadline: string;
  claimed_at: string;
  hibernated: boolean;
  phase?: string;
  updated_at?: string;
  from_checkpoint?: string;
  claim_ref?: string;
  /** The node's change counter at this row's last change (monotonic per node, across restarts). */
  rv: number;
  object?: StoredObject;
  /** The VM's size (nodes that report it). */
  vcpus?: number;
  memory_mib?: number;
  /** The egress policy its VM enforces (absent: the secure default; docs/sandboxd-api.md "Network policy"). */
  network?: VmNetworkPolicy;
  /** Paused with its files only (docs/sandboxd-api.md "Filesystem pause"): no VM; resume reboots with them. */
  pause_mode?: 'filesystem';
  layer_bytes?: number;
  /** While hibernated on a replicating node: the record another node can resume it from (docs/placement.md). */
  hibernation_checkpoint?: string;
  /** A sandbox resumed on this node from another's hibernation record: the claim it was there. */
  resumed_from?: { node: string; claim_id: string };
}

export interface SandboxEntry {
  /** `<namespace>/<name>`. */
  readonly key: string;
  readonly namespace: string;
  readonly name: string;
  readonly uid: string;
  readonly node: string;
  /** The node's sandboxd address (`host:port`), where verbs for this sandbox go. */
  readonly address: string;
  readonly claimId: string;
  readonly phase: string;
  readonly phaseSince: string;
  /**
   * When the node made the claim (its record's `claimed_at`, milliseconds): the sandbox's start, kept by the node
   * that holds it, where creationTimestamp has whole seconds only (the e2b API's `startedAt`, its list order).
   */
  readonly claimedAt: string;
  readonly deadline: string;
  readonly pool: PoolKeyOf;
  readonly fromCheckpoint: string | undefined;
  readonly object: StoredObject;
  readonly nodeRv: number;
  /** The VM's vCPUs and memory as its node reports them (undefined from older nodes). */
  readonly vcpus: number | undefined;
  readonly memoryMiB: number | undefined;
  /** The egress policy as its node reports it (the e2b API shows the tenant layer as `network`). */
  readonly network: VmNetworkPolicy | undefined;
  /** `filesystem` while paused with its files only (NodeRow.pause_mode); the e2b API's `pauseMode`. */
  readonly pauseMode?: 'filesystem';
  /** NodeRow.hibernation_checkpoint: where it resumes from when its node is gone. */
  readonly hibernationCheckpoint?: string;
  /** NodeRow.resumed_from: the claim (on another node) this one replaced. */
  readonly resumedFrom?: { node: string; claimId: string };
  /** This server's resourceVersion of the entry (set when the change is applied). */
  readonly rv: string;
}

export const SANDBOX_API_VERSION = `${AGENTS_GROUP}/${HUB_VERSION}`;

/** Only rows that carry a Kubernetes identity are Sandboxes of this API (pod-backed VMs are Pods, not these). */
export function entryFromRow(row: NodeRow, node: string, address: string, rv: string): SandboxEntry | undefined {
  const o = row.object;
  if (!o || !o.metadata?.name || !o.metadata.namespace || !o.metadata.uid) return undefined;
  const phase = row.phase ?? (row.hibernated ? 'Hibernated' : 'Running');
  return {
    key: `${o.metadata.namespace}/${o.metadata.name}`,
    namespace: o.metadata.namespace,
    name: o.metadata.name,
    uid: o.metadata.uid,
    node,
    address,
    claimId: row.id,
    phase,
    phaseSince: row.updated_at ?? row.claimed_at,
    claimedAt: row.claimed_at,
    deadline: row.deadline,
    pool: row.key,
    fromCheckpoint: row.from_checkpoint,
    object: o,
    nodeRv: row.rv,
    vcpus: row.vcpus,
    memoryMiB: row.memory_mib,
    network: row.network,
    ...(row.pause_mode === 'filesystem' ? { pauseMode: 'filesystem' as const } : {}),
    ...(row.hibernation_checkpoint ? { hibernationCheckpoint: row.hibernation_checkpoint } : {}),
    ...(row.resumed_from ? { resumedFrom: { node: row.resumed_from.node, claimId: row.resumed_from.claim_id } } : {}),
    rv,
  };
}

/**
 * Entries differ for readers (a watch MODIFIED) only if what they materialize to differs. The stored object is
 * fixed at claim time (the node never changes it), so it is not compared.
 */
export function sameContent(a: SandboxEntry, b: SandboxEntry): boolean {
  return (
    a.claimId === b.claimId &&
    a.phase === b.phase &&
    a.pauseMode === b.pauseMode &&
    a.deadline === b.deadline &&
    a.node === b.node &&
    a.address === b.address &&
    a.uid === b.uid
  );
}

const hostOf = (addr: string) => {
  const i = addr.lastIndexOf(':');
  return i > 0 ? addr.slice(0, i).replace(/^\[|\]$/g, '') : addr;
};

/** Labels the server adds (selector axes): the node, the phase. User labels come first and cannot override them. */
export function entryLabels(e: SandboxEntry): Record<string, string> {
  return {
    ...e.object.metadata.labels,
    [CocoonAnnotationKeys.node]: e.node,
    [CocoonAnnotationKeys.phase]: e.phase,
  };
}

export function entryMetadata(e: SandboxEntry) {
  const m = e.object.metadata;
  return {
    name: e.name,
    namespace: e.namespace,
    uid: e.uid,
    resourceVersion: e.rv,
    creationTimestamp: m.creationTimestamp,
    labels: entryLabels(e),
    annotations: {
      ...m.annotations,
      [CocoonAnnotationKeys.claimId]: e.claimId,
      [CocoonAnnotationKeys.address]: e.address,
      [CocoonAnnotationKeys.deadline]: kubeTime(e.deadline),
    },
    ...(m.ownerReferences?.length ? { ownerReferences: m.ownerReferences } : {}),
  };
}

export function readyCondition(e: SandboxEntry) {
  const running = e.phase === 'Running';
  return {
    type: 'Ready',
    status: running ? 'True' : 'False',
    lastTransitionTime: kubeTime(e.phaseSince),
    reason: e.phase || 'Unknown',
    message: running
      ? `sandbox ${e.claimId} is running on node ${e.node}`
      : `sandbox ${e.claimId} is ${e.phase.toLowerCase()} on node ${e.node}`,
  };
}

/** The full Sandbox (agents.x-k8s.io/v1beta1). Never carries the sandbox's token. */
export function toSandbox(e: SandboxEntry): Sandbox {
  return {
    apiVersion: SANDBOX_API_VERSION,
    kind: 'Sandbox',
    metadata: entryMetadata(e),
    spec: e.object.spec,
    status: {
      nodeName: e.node,
      podIPs: [hostOf(e.address)],
      conditions: [readyCondition(e) as NonNullable<NonNullable<Sandbox['status']>['conditions']>[number]],
    },
  };
}

/** The values field selectors compare (metadata.name, metadata.namespace, status.nodeName, status.phase). */
export const SANDBOX_FIELDS = ['metadata.name', 'metadata.namespace', 'status.nodeName', 'status.phase'] as const;

export function entryField(e: SandboxEntry, field: string): string {
  switch (field) {
    case 'metadata.name':
      return e.name;
    case 'metadata.namespace':
      return e.namespace;
    case 'status.nodeName':
      return e.node;
    case 'status.phase':
      return e.phase;
    default:
      return '';
  }
}
