/**
 * The e2b API's collection reads: sandboxes (newest first or `order=asc`, state and metadata filters, `limit`, and
 * `X-Next-Token` pages that name the last sandbox served, so a page survives creates and kills in between), snapshots (every node's
 * checkpoints of this namespace's sandboxes), and the template alias table.
 */
import type { Fleet } from '../sandboxes/fleet.js';
import type { SandboxdClient } from '../sandboxes/sandboxd-client.js';
import type { SandboxStore } from '../sandboxes/store.js';
import type { SandboxEntry } from '../sandboxes/entry.js';
import {
  deleteNamespaceCheckpoint,
  namespaceCheckpoints,
  nodeByAddress,
  snapshotCopies,
  type HeldCheckpoint,
} from '../sandboxes/checkpoints.js';
import { ENVD_VERSION } from '../../api/envd.js';
import { badRequest, metadataFilter } from './http.js';
import type { TemplateAlias } from './templates.js';
import { listedView, metadataOf, startedAt, stateOf, templateIdOf } from './views.js';

const DEFAULT_LIMIT = 100;
const MAX_LIMIT = 1000;

/**
 * A page token names the last sandbox served by its place in the order (start time, then key), so the next page
 * starts right after it whatever was created or killed in between, and the order holds across pages.
 */
interface Cursor {
  ms: number;
  key: string;
}
const encodeToken = (c: Cursor) => Buffer.from(JSON.stringify([c.ms, c.key])).toString('base64url');
function decodeToken(t: string, namespace: string): Cursor {
  let v: unknown;
  try {
    v = JSON.parse(Buffer.from(t, 'base64url').toString('utf8'));
  } catch {
    v = undefined;
  }
  if (
    !Array.isArray(v) ||
    v.length !== 2 ||
    !Number.isFinite(v[0]) ||
    typeof v[1] !== 'string' ||
    !v[1].startsWith(`${namespace}/`)
  )
    throw badRequest('nextToken: not a token this server gave');
  return { ms: v[0] as number, key: v[1] };
}

/**
 * `GET /v2/sandboxes`: e2b's order, newest start first unless `order=asc`, over the whole listing (every page is a
 * slice of one order); `startedAfter` includes a sandbox started at that very instant.
 */
export function listSandboxes(
  store: SandboxStore,
  namespace: string,
  q: URLSearchParams,
): { items: ReturnType<typeof listedView>[]; nextToken: string | undefined } {
  const states = (q.get('state') ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  for (const s of states)
    if (s !== 'running' && s !== 'paused') throw badRequest(`state: "${s}" is not running or paused`);
  const metadata = metadataFilter(q.get('metadata'));
  const template = q.get('template');
  const startedAfter = q.get('startedAfter');
  const after = startedAfter ? Date.parse(startedAfter) : undefined;
  if (after !== undefined && !Number.isFinite(after)) throw badRequest('startedAfter: not an ISO time');
  const rawLimit = q.get('limit');
  const limit = rawLimit === null ? DEFAULT_LIMIT : Number(rawLimit);
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LIMIT)
    throw badRequest(`limit: an integer from 1 to ${MAX_LIMIT}`);
  const order = q.get('order') ?? 'desc';
  if (order !== 'asc' && order !== 'desc') throw badRequest(`order: "${order}" is not asc or desc`);
  const dir = order === 'asc' ? 1 : -1;
  const token = q.get('nextToken');
  const from = token ? decodeToken(token, namespace) : undefined;
  /** Negative when `a` comes first in the listing's order. */
  const compare = (a: Cursor, b: Cursor) => dir * (a.ms - b.ms || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  const matches = (e: SandboxEntry, ms: number) => {
    if (states.length && !states.includes(stateOf(e))) return false;
    if (template && templateIdOf(e) !== template) return false;
    if (after !== undefined && ms < after) return false;
    const md = metadataOf(e);
    return Object.entries(metadata).every(([k, v]) => md[k] === v);
  };
  const rest: Array<Cursor & { e: SandboxEntry }> = [];
  for (const key of store.keysFrom(namespace)) {
    const e = store.get(key);
    if (!e) continue;
    const at = { ms: Date.parse(startedAt(e)), key };
    if ((from && compare(at, from) <= 0) || !matches(e, at.ms)) continue;
    rest.push({ ...at, e });
  }
  rest.sort(compare);
  const page = rest.slice(0, limit);
  const last = page[page.length - 1];
  return {
    items: page.map((p) => listedView(p.e)),
    nextToken: rest.length > limit && last ? encodeToken(last) : undefined,
  };
}

/** One row of e2b's `GET /snapshots`: SnapshotInfo's fields, then ours (docs/e2b.md "Snapshot copies"). */
export interface SnapshotListed {
  snapshotID: string;
  names: string[];
  sandboxID?: string;
  createdAt: string;
  /** How many nodes held it at the last count, how many should, and which (by node name); absent until counted. */
  copies?: number;
  copiesWanted?: number;
  copyNodes?: string[];
}

/**
 * `GET /snapshots`: one row per snapshot, newest first. A snapshot is held by several nodes when it is replicated
 * (docs/placement.md "Replicas"); e2b lists a snapshot once, so the nodes' rows are grouped by id. Beyond e2b's
 * SnapshotInfo (snapshotID, names) each row says where its copies are: the SDKs keep only the fields they model
 * (JS maps each row to {snapshotId, names}; Python's generated model puts the rest in additional_properties), so
 * the extra keys are for callers of the HTTP API and break neither.
 */
export async function listSnapshots(
  fleet: Fleet,
  client: SandboxdClient,
  store: SandboxStore,
  namespace: string,
  q: URLSearchParams,
): Promise<SnapshotListed[]> {
  const want = q.get('sandboxID');
  const name = q.get('name');
  const byId = new Map<string, HeldCheckpoint[]>();
  for (const h of await namespaceCheckpoints(fleet, client, store, namespace)) {
    if ((want && h.owner?.name !== want) || (name && h.ck.name !== name)) continue;
    byId.set(h.ck.id, [...(byId.get(h.ck.id) ?? []), h]);
  }
  const nodeAt = nodeByAddress(fleet);
  return [...byId.values()]
    .map((held) => {
      const { ck, owner } = held[0]!;
      const copies = snapshotCopies(held, nodeAt);
      return {
        snapshotID: ck.id,
        names: ck.name ? [ck.name] : [],
        ...(owner ? { sandboxID: owner.name } : {}),
        createdAt: ck.created_at,
        ...(copies ? { copies: copies.count, copiesWanted: copies.want, copyNodes: copies.nodes } : {}),
      };
    })
    .sort((a, b) => b.createdAt.localeCompare(a.createdAt) || a.snapshotID.localeCompare(b.snapshotID));
}

/** This namespace's snapshot `id` and the node that holds it (its row carries the pool key it was taken of). */
export async function findSnapshot(
  fleet: Fleet,
  client: SandboxdClient,
  store: SandboxStore,
  namespace: string,
  id: string,
): Promise<HeldCheckpoint | undefined> {
  return (await namespaceCheckpoints(fleet, client, store, namespace)).find(({ ck }) => ck.id === id);
}

/**
 * Delete this namespace's snapshot `id` from every node that holds it; false when none does. Another namespace's
 * checkpoint with that id is not this API's to delete, and reads as absent.
 */
export async function deleteSnapshot(
  fleet: Fleet,
  client: SandboxdClient,
  store: SandboxStore,
  namespace: string,
  id: string,
): Promise<boolean> {
  const { deleted } = await deleteNamespaceCheckpoint(fleet, client, store, namespace, id);
  return deleted.length > 0;
}

/** The alias table as e2b's Template list; sizes from a live sandbox of the template when there is one. */
export function listTemplates(store: SandboxStore, namespace: string, aliases: readonly TemplateAlias[]) {
  const live = new Map<string, SandboxEntry>();
  for (const key of store.keysFrom(namespace)) {
    const e = store.get(key);
    if (e && !live.has(templateIdOf(e))) live.set(templateIdOf(e), e);
  }
  return aliases.map((a) => {
    const e = live.get(a.id);
    return {
      templateID: a.id,
      buildID: a.template,
      aliases: [a.id],
      names: [a.id],
      public: true,
      buildStatus: 'ready',
      envdVersion: ENVD_VERSION,
      ...(e
        ? { cpuCount: e.vcpus ?? 0, memoryMB: e.memoryMiB ?? 0, diskSizeMB: Math.floor((e.memoryMiB ?? 0) / 2) }
        : {}),
    };
  });
}
