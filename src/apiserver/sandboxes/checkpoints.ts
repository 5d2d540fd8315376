/**
 * Which node checkpoints a namespace may use. sandboxd records, with each checkpoint, the `<namespace>/<name>` of
 * the sandbox it was taken of (claim_ref); a checkpoint is that namespace's alone, for every API that reaches it
 * (a Sandbox created from a snapshot, the e2b snapshot list, create and delete). One rule, here, so the APIs cannot
 * drift apart.
 */
import type { SnapshotCopies } from '../../api/index.js';
import type { Fleet } from './fleet.js';
import type { SandboxdClient } from './sandboxd-client.js';
import type { SandboxEntry } from './entry.js';
import type { SandboxStore } from './store.js';

/** A row of sandboxd's `GET /v1/checkpoints` (docs/sandboxd-api.md). */
export interface CheckpointRow {
  id: string;
  name?: string;
  sandbox_id: string;
  /** `<namespace>/<name>` of the sandbox it was taken of (absent on records older than this field). */
  claim_ref?: string;
  created_at: string;
  /** The pool key of the sandbox it was taken of (its guest template, net, size). */
  key: { template: string; net: string; size: string };
  /** Where its copies are, as this node last counted (addresses); absent until it has (docs/placement.md). */
  copies?: { nodes: string[]; want: number; checked_at: string };
}

/** A checkpoint with the node that holds it and, while it lives, the sandbox it was taken of. */
export interface HeldCheckpoint {
  node: string;
  address: string;
  ck: CheckpointRow;
  owner?: SandboxEntry;
}

/**
 * The namespace a checkpoint belongs to: its claim_ref's, or for a record older than that field, the namespace of
 * the live sandbox it was taken of. A legacy record whose sandbox is gone belongs to no namespace: nobody can prove
 * it theirs, so no API serves it (sandboxd's own API, with its node token, still reaches it).
 */
export function checkpointNamespace(ck: CheckpointRow, owner: SandboxEntry | undefined): string | undefined {
  if (ck.claim_ref !== undefined) return ck.claim_ref.split('/')[0];
  return owner?.namespace;
}

/**
 * Every reachable node's checkpoints that are `namespace`'s (every namespace's for `''`), asked in parallel; a node
 * that does not answer is skipped (what it holds reads as absent until it is back), and is named in `unreachable`.
 * `syncedOnly` also skips nodes whose feed has not synced, for a caller about to act on the node's answer.
 */
export async function namespaceCheckpoints(
  fleet: Fleet,
  client: SandboxdClient,
  store: SandboxStore,
  namespace: string,
  opts: { syncedOnly?: boolean; unreachable?: string[] } = {},
): Promise<HeldCheckpoint[]> {
  const out: HeldCheckpoint[] = [];
  await Promise.all(
    fleet.nodeNames().map(async (node) => {
      const address = fleet.address(node);
      if (!address || (opts.syncedOnly && !fleet.isSynced(node))) return;
      const r = (await client.call(node, address, 'GET', '/v1/checkpoints').catch(() => {
        opts.unreachable?.push(node);
        return undefined;
      })) as { checkpoints?: CheckpointRow[] } | undefined;
      for (const ck of r?.checkpoints ?? []) {
        const owner = store.getByClaim(ck.sandbox_id);
        const ns = checkpointNamespace(ck, owner);
        if (ns === undefined || (namespace && ns !== namespace)) continue;
        out.push({ node, address, ck, ...(owner ? { owner } : {}) });
      }
    }),
  );
  return out;
}

/**
 * Delete `namespace`'s checkpoint `id` from every node that holds it (each node also tells its peers); the nodes
 * that deleted it. Another namespace's checkpoint with that id is not this namespace's to delete, and reads as
 * absent. A node that fails the delete keeps its copy, and the error says which.
 */
export async function deleteNamespaceCheckpoint(
  fleet: Fleet,
  client: SandboxdClient,
  store: SandboxStore,
  namespace: string,
  id: string,
): Promise<{ held: HeldCheckpoint[]; deleted: string[]; failed: Array<{ node: string; err: unknown }> }> {
  const held = (await namespaceCheckpoints(fleet, client, store, namespace)).filter(({ ck }) => ck.id === id);
  const deleted: string[] = [];
  const failed: Array<{ node: string; err: unknown }> = [];
  await Promise.all(
    held.map(({ node, address }) =>
      client.call(node, address, 'DELETE', `/v1/checkpoints/${encodeURIComponent(id)}`).then(
        () => void deleted.push(node),
        (err: unknown) => void failed.push({ node, err }),
      ),
    ),
  );
  return { held, deleted, failed };
}

/** A node's name by its sandboxd address, from the fleet (NodeInventory's `address`); undefined for a stranger. */
export function nodeByAddress(fleet: Pick<Fleet, 'nodeNames' | 'address'>): (address: string) => string | undefined {
  const names = new Map<string, string>();
  for (const node of fleet.nodeNames()) {
    const a = fleet.address(node);
    if (a) names.set(a, node);
  }
  return (address) => names.get(address);
}

/** The most nodes one count may name: a row that names more is not a count this fleet made, and is not shown. */
const MAX_COPY_NODES = 1024;

/**
 * One snapshot's copies from the rows of the nodes that hold it: the newest count any of them made (each holder
 * counts on its own, docs/placement.md "Replicas"), its addresses named by node. Undefined until one has counted;
 * a row whose `copies` is not the shape sandboxd writes is skipped, not trusted.
 */
export function snapshotCopies(
  held: readonly Pick<HeldCheckpoint, 'ck'>[],
  nodeAt: (address: string) => string | undefined,
): SnapshotCopies | undefined {
  let newest: NonNullable<CheckpointRow['copies']> | undefined;
  for (const { ck } of held) {
    const c = ck.copies as unknown;
    if (!isCopies(c)) continue;
    if (!newest || Date.parse(c.checked_at) > Date.parse(newest.checked_at)) newest = c;
  }
  if (!newest) return undefined;
  const nodes = [...new Set(newest.nodes.map((a) => nodeAt(a) ?? a))].sort();
  return { count: nodes.length, want: newest.want, nodes, checkedAt: new Date(newest.checked_at).toISOString() };
}

function isCopies(c: unknown): c is NonNullable<CheckpointRow['copies']> {
  if (typeof c !== 'object' || c === null) return false;
  const { nodes, want, checked_at } = c as Record<string, unknown>;
  return (
    Array.isArray(nodes) &&
    nodes.length <= MAX_COPY_NODES &&
    nodes.every((n) => typeof n === 'string' && n.length > 0) &&
    Number.isInteger(want) &&
    (want as number) >= 1 &&
    (want as number) <= MAX_COPY_NODES &&
    typeof checked_at === 'string' &&
    Number.isFinite(Date.parse(checked_at))
  );
}
