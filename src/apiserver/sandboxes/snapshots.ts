/**
 * The REST storage of `sandboxsnapshots`: the checkpoints the nodes hold, per namespace (checkpoints.ts decides
 * whose each is), served for get, list and delete. A snapshot is taken with the `snapshot` subresource of its
 * Sandbox and outlives it, so it needs a resource of its own to be deleted by: before, the Kubernetes API could take
 * snapshots but not remove one, and a namespace's only way out of its checkpoint quota (sandboxd
 * --max-checkpoints-per-namespace) was the TTL. Reads ask the nodes (no etcd object, no cache): a snapshot is named
 * by its snapshotID, and the same id held by several nodes (pulled copies, docs/placement.md) is one object.
 */
import { createHash } from 'node:crypto';
import { kubeTime, SandboxSnapshotV1beta1Schema, type KubeObject, type SnapshotCopies } from '../../api/index.js';
import type { ListOptions } from '../list-options.js';
import { humanDuration, type Renderer } from '../render.js';
import {
  conflict,
  methodNotAllowed,
  notFound,
  serviceUnavailable,
  type QualifiedResource,
  type StatusFailure,
} from '../status.js';
import type { ResourceDescriptor, TableColumn } from '../types.js';
import { nodeFailure } from './actions.js';
import {
  checkpointNamespace,
  deleteNamespaceCheckpoint,
  namespaceCheckpoints,
  nodeByAddress,
  snapshotCopies,
  type HeldCheckpoint,
} from './checkpoints.js';
import { SANDBOX_API_VERSION } from './entry.js';
import type { Fleet } from './fleet.js';
import type { SandboxdClient } from './sandboxd-client.js';
import type { SandboxStore } from './store.js';

export const SNAPSHOTS: QualifiedResource = { group: 'agents.x-k8s.io', resource: 'sandboxsnapshots' };
const FIELDS = ['metadata.name', 'metadata.namespace'] as const;

/** One snapshot of one namespace, with every node that holds it (newest record first). */
export interface SnapshotItem {
  id: string;
  namespace: string;
  held: HeldCheckpoint[];
  /** Where its copies are, by node name, as a holder last counted them (absent until one has). */
  copies?: SnapshotCopies;
}

/** A stable UID from the id (the object has no etcd record to keep one in), for delete preconditions. */
function uidOf(item: SnapshotItem): string {
  const h = createHash('sha256').update(`${item.namespace}/${item.id}`).digest('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20, 32)}`;
}

function metadataOf(item: SnapshotItem): NonNullable<KubeObject['metadata']> {
  const ck = item.held[0]!.ck;
  return {
    name: item.id,
    namespace: item.namespace,
    uid: uidOf(item),
    creationTimestamp: kubeTime(ck.created_at),
  };
}

const nodesOf = (item: SnapshotItem) => [...new Set(item.held.map((h) => h.node))].sort();

/** The sandbox it was taken of: the live one's name, else the name in its claim_ref. */
function sandboxName(item: SnapshotItem): string | undefined {
  const { ck, owner } = item.held[0]!;
  return owner?.name ?? ck.claim_ref?.slice(ck.claim_ref.indexOf('/') + 1);
}

function toObject(item: SnapshotItem): KubeObject {
  const { ck } = item.held[0]!;
  const sandbox = sandboxName(item);
  return {
    apiVersion: SANDBOX_API_VERSION,
    kind: 'SandboxSnapshot',
    metadata: metadataOf(item),
    ...(ck.name ? { snapshotName: ck.name } : {}),
    ...(sandbox ? { sandboxName: sandbox } : {}),
    nodeNames: nodesOf(item),
    ...(item.copies ? { copies: item.copies } : {}),
    template: ck.key.template,
    net: ck.key.net,
    size: ck.key.size,
  } as KubeObject;
}

const COLUMNS: readonly TableColumn<SnapshotItem>[] = [
  { name: 'Name', type: 'string', format: 'name', description: 'The snapshotID', priority: 0, cell: (i) => i.id },
  {
    name: 'Snapshot-Name',
    type: 'string',
    description: 'The name given when it was taken',
    priority: 0,
    cell: (i) => i.held[0]!.ck.name ?? '',
  },
  {
    name: 'Sandbox',
    type: 'string',
    description: 'The Sandbox it was taken of',
    priority: 0,
    cell: (i) => sandboxName(i) ?? '',
  },
  {
    name: 'Nodes',
    type: 'string',
    description: 'The nodes that hold a copy',
    priority: 0,
    cell: (i) => nodesOf(i).join(','),
  },
  {
    name: 'Copies',
    type: 'string',
    description: 'Nodes that held it / nodes that should, at the last count (empty until a node has counted)',
    priority: 0,
    cell: (i) => (i.copies ? `${i.copies.count}/${i.copies.want}` : ''),
  },
  {
    name: 'Age',
    type: 'string',
    description: 'Time since it was taken',
    priority: 0,
    cell: (i, now) => humanDuration(now - Date.parse(i.held[0]!.ck.created_at)),
  },
  {
    name: 'Template',
    type: 'string',
    description: 'The pool key of the sandbox it was taken of',
    priority: 1,
    cell: (i) => {
      const k = i.held[0]!.ck.key;
      return `${k.template} (${k.net}, ${k.size})`;
    },
  },
];

export class SnapshotStorage {
  readonly descriptor: ResourceDescriptor = {
    group: SNAPSHOTS.group,
    version: 'v1beta1',
    kind: 'SandboxSnapshot',
    listKind: 'SandboxSnapshotList',
    plural: SNAPSHOTS.resource,
    singular: 'sandboxsnapshot',
    namespaced: true,
    shortNames: [],
    categories: [],
    verbs: ['delete', 'get', 'list'],
    schema: SandboxSnapshotV1beta1Schema,
    description:
      'A snapshot of a Sandbox (taken with its snapshot subresource), read from the nodes that hold it; delete it to free its place in the namespace’s checkpoint quota.',
    subresources: [],
  };
  readonly renderer: Renderer<SnapshotItem> = {
    apiVersion: SANDBOX_API_VERSION,
    listKind: 'SandboxSnapshotList',
    columns: COLUMNS,
    toObject,
    metadataOf,
  };
  readonly fields = FIELDS;

  constructor(
    private readonly store: SandboxStore,
    private readonly fleet: Fleet,
    private readonly client: SandboxdClient,
  ) {}

  /** This namespace's snapshots (every namespace's for `''`), grouped by id, and the nodes that did not answer. */
  private async items(namespace: string): Promise<{ items: SnapshotItem[]; unreachable: string[] }> {
    const unreachable: string[] = [];
    const held = await namespaceCheckpoints(this.fleet, this.client, this.store, namespace, { unreachable });
    const byKey = new Map<string, SnapshotItem>();
    for (const h of held) {
      const ns = checkpointNamespace(h.ck, h.owner)!;
      const key = `${ns}/${h.ck.id}`;
      const item = byKey.get(key) ?? { id: h.ck.id, namespace: ns, held: [] };
      item.held.push(h);
      byKey.set(key, item);
    }
    const items = [...byKey.entries()].sort(([a], [b]) => a.localeCompare(b)).map(([, i]) => i);
    const nodeAt = nodeByAddress(this.fleet);
    for (const i of items) {
      i.held.sort((a, b) => b.ck.created_at.localeCompare(a.ck.created_at));
      const copies = snapshotCopies(i.held, nodeAt);
      if (copies) i.copies = copies;
    }
    return { items, unreachable: unreachable.sort() };
  }

  async get(namespace: string, name: string): Promise<SnapshotItem> {
    const item = (await this.items(namespace)).items.find((i) => i.id === name);
    if (!item) throw notFound(SNAPSHOTS, name);
    return item;
  }

  async list(namespace: string, opts: ListOptions) {
    const { items, unreachable } = await this.items(namespace);
    const field = (i: SnapshotItem, f: string) =>
      f === 'metadata.name' ? i.id : f === 'metadata.namespace' ? i.namespace : '';
    return {
      items: items.filter((i) => opts.labelSelector.matches({}) && opts.fieldSelector.matches((f) => field(i, f))),
      // Read from the nodes each time: there is no version to resume from, and no continue token.
      resourceVersion: '0',
      continueToken: undefined,
      omittedNodes: unreachable,
    };
  }

  /** Delete it from every node that holds it (each node also tells its peers: docs/placement.md). */
  async delete(namespace: string, name: string, opts: { uid?: string; dryRun: boolean }): Promise<KubeObject> {
    const item = await this.get(namespace, name);
    if (opts.uid && opts.uid !== uidOf(item))
      throw conflict(SNAPSHOTS, name, `the UID in the precondition (${opts.uid}) does not match ${uidOf(item)}`);
    if (opts.dryRun) return toObject(item);
    const { failed } = await deleteNamespaceCheckpoint(this.fleet, this.client, this.store, namespace, name);
    if (failed.length) {
      const first: StatusFailure = nodeFailure(failed[0]!.err, name, `deleting snapshot ${name}`);
      throw serviceUnavailable(
        `node ${failed.map((f) => f.node).join(', ')} did not delete its copy of snapshot ${name} (${first.status.message}); retry the delete`,
        2,
      );
    }
    return toObject(item);
  }

  watch(): never {
    throw methodNotAllowed('GET', 'sandboxsnapshots (watch: list again instead)');
  }

  create(): never {
    throw methodNotAllowed('POST', 'sandboxsnapshots (take one with the snapshot subresource of a Sandbox)');
  }

  bookmark(rv: string): unknown {
    return { kind: 'SandboxSnapshot', apiVersion: SANDBOX_API_VERSION, metadata: { resourceVersion: rv } };
  }
}
