/**
 * The REST storage of `sandboxes` (metrics-server's shape: one storage object per resource, implementing only the
 * verbs it serves). Reads come from the in-memory store, so a Get is one index lookup and a page of a list costs
 * its page, not the fleet; creates are node-local claims (create.ts); deletes release on the owning node.
 */
import { SandboxV1beta1Schema, type Sandbox } from '../../api/index.js';
import type { Logger } from '../../log/logger.js';
import type { ListOptions } from '../list-options.js';
import { humanDuration, type Renderer } from '../render.js';
import { conflict, expired, notFound, serviceUnavailable, internalError, badRequest } from '../status.js';
import type { ResourceDescriptor, TableColumn } from '../types.js';
import { SANDBOX_ACTIONS, SandboxActions } from './actions.js';
import type { SandboxVerbEvents } from './verb-events.js';
import type { WatchEventOf } from '../watch-stream.js';
import { SandboxCreator, SANDBOXES, type CreateRequest, type NamespaceState } from './create.js';
import {
  entryField,
  entryMetadata,
  SANDBOX_API_VERSION,
  SANDBOX_FIELDS,
  toSandbox,
  type SandboxEntry,
} from './entry.js';
import type { Fleet } from './fleet.js';
import { NodeHttpError, type SandboxdClient } from './sandboxd-client.js';
import type { SandboxStore } from './store.js';

const ago = (ts: string, now: number) => {
  const t = Date.parse(ts);
  return Number.isFinite(t) ? humanDuration(now - t) : '<unknown>';
};

export const SANDBOX_COLUMNS: readonly TableColumn<SandboxEntry>[] = [
  {
    name: 'Name',
    type: 'string',
    format: 'name',
    description: 'Name of the sandbox',
    priority: 0,
    cell: (e) => e.name,
  },
  {
    name: 'Phase',
    type: 'string',
    description: 'What the node reports: Running, Paused or Hibernated',
    priority: 0,
    cell: (e) => e.phase,
  },
  {
    name: 'Node',
    type: 'string',
    description: 'The node whose microVM backs the sandbox',
    priority: 0,
    cell: (e) => e.node,
  },
  {
    name: 'Claim',
    type: 'string',
    description: 'The node-local claim id (sandboxd)',
    priority: 0,
    cell: (e) => e.claimId,
  },
  {
    name: 'Deadline',
    type: 'string',
    description: 'When the lease ends (the VM is released then)',
    priority: 0,
    cell: (e, now) => {
      const t = Date.parse(e.deadline);
      return t > now ? `in ${humanDuration(t - now)}` : 'expired';
    },
  },
  {
    name: 'Age',
    type: 'string',
    description: 'Time since creation',
    priority: 0,
    cell: (e, now) => ago(e.object.metadata.creationTimestamp, now),
  },
  {
    name: 'Template',
    type: 'string',
    description: 'The pool key: template, net lane and size',
    priority: 1,
    cell: (e) => `${e.pool.template} (${e.pool.net}, ${e.pool.size})`,
  },
  {
    name: 'Address',
    type: 'string',
    description: 'The node daemon address serving this sandbox',
    priority: 1,
    cell: (e) => e.address,
  },
];

export const SANDBOX_RENDERER: Renderer<SandboxEntry> = {
  apiVersion: SANDBOX_API_VERSION,
  listKind: 'SandboxList',
  columns: SANDBOX_COLUMNS,
  toObject: toSandbox,
  metadataOf: entryMetadata,
};

export interface ListResult {
  items: SandboxEntry[];
  resourceVersion: string;
  continueToken: string | undefined;
  /** Nodes whose sandboxes are left out (feed down); the server says so in a Warning header. */
  omittedNodes: string[];
}

export interface WatchPlan {
  replay: WatchEventOf<SandboxEntry>[] | undefined;
  initial: SandboxEntry[];
  initialEventsEndRv: string | undefined;
  matches(e: SandboxEntry): boolean;
  subscribe(deliver: (ev: WatchEventOf<SandboxEntry>) => void): () => void;
}

interface ContinueToken {
  v: 1;
  boot: string;
  after: string;
}

export class SandboxStorage {
  readonly descriptor: ResourceDescriptor;
  readonly renderer = SANDBOX_RENDERER;
  readonly fields = SANDBOX_FIELDS;
  private readonly creator: SandboxCreator;
  private readonly actions: SandboxActions;

  constructor(
    private readonly store: SandboxStore,
    private readonly fleet: Fleet,
    private readonly client: SandboxdClient,
    namespaces: NamespaceState,
    private readonly log: Logger,
    /** The lifecycle verbs' Events (verb-events.ts); none when absent. */
    events?: SandboxVerbEvents,
  ) {
    this.creator = new SandboxCreator(store, fleet, client, namespaces, log);
    this.actions = new SandboxActions(store, client, events, fleet);
    this.descriptor = {
      group: SANDBOXES.group,
      version: 'v1beta1',
      kind: 'Sandbox',
      listKind: 'SandboxList',
      plural: 'sandboxes',
      singular: 'sandbox',
      namespaced: true,
      shortNames: [],
      categories: [],
      verbs: ['create', 'delete', 'get', 'list', 'watch'],
      schema: SandboxV1beta1Schema,
      description: 'A sandbox backed by a microVM on a sandboxd node, served from the nodes (no etcd object).',
      subresources: [...SANDBOX_ACTIONS],
    };
  }

  get(namespace: string, name: string): SandboxEntry {
    const e = this.store.get(`${namespace}/${name}`);
    if (!e) throw notFound(SANDBOXES, name);
    return e;
  }

  private matcher(namespace: string, opts: ListOptions): (e: SandboxEntry) => boolean {
    return (e) =>
      (!namespace || e.namespace === namespace) &&
      opts.labelSelector.matches(this.renderer.metadataOf(e).labels) &&
      opts.fieldSelector.matches((f) => entryField(e, f));
  }

  list(namespace: string, opts: ListOptions): ListResult {
    const versions = this.store.log.versions;
    if (opts.resourceVersionMatch === 'Exact' && opts.resourceVersion !== versions.current.toString())
      throw expired(
        `resourceVersion ${opts.resourceVersion} is not the current one; list without resourceVersionMatch=Exact`,
      );
    let after: string | undefined;
    if (opts.continueToken) after = this.decodeContinue(opts.continueToken);
    const byName = opts.fieldSelector.equal('metadata.name');
    const matches = this.matcher(namespace, opts);
    const items: SandboxEntry[] = [];
    const omitted = new Set<string>();
    let last: string | undefined;
    let more = false;
    const consider = (e: SandboxEntry) => {
      if (!matches(e)) return;
      if (!this.store.nodeAvailable(e.node)) {
        omitted.add(e.node);
        return;
      }
      items.push(e);
    };
    if (byName !== undefined && namespace) {
      const e = this.store.get(`${namespace}/${byName}`);
      if (e && (after === undefined || e.key > after)) consider(e);
    } else {
      for (const k of this.store.keysFrom(namespace, after)) {
        if (opts.limit > 0 && items.length >= opts.limit) {
          more = true;
          break;
        }
        const e = this.store.get(k);
        if (e) consider(e);
        last = k;
      }
    }
    return {
      items,
      resourceVersion: versions.current.toString(),
      continueToken: more && last ? this.encodeContinue(last) : undefined,
      omittedNodes: [...omitted].sort(),
    };
  }

  /** Snapshot and subscription in one synchronous step, so no change falls between them. */
  watch(namespace: string, opts: ListOptions): WatchPlan {
    const matches = this.matcher(namespace, opts);
    const rv = opts.resourceVersion;
    const log = this.store.log;
    const current = log.versions.current.toString();
    let replay: WatchPlan['replay'];
    let initial: SandboxEntry[] = [];
    let end: string | undefined;
    if (opts.sendInitialEvents === true) {
      initial = this.store.snapshot(namespace);
      end = current;
    } else if (!rv || rv === '0') {
      initial = opts.sendInitialEvents === false ? [] : this.store.snapshot(namespace);
    } else {
      const events = log.since(rv);
      if (!events) throw expired(`too old resource version: ${rv} (current ${current})`);
      replay = events;
    }
    return {
      replay,
      initial,
      initialEventsEndRv: end,
      matches,
      subscribe: (deliver) => log.subscribe({ deliver }),
    };
  }

  /** POST to a lifecycle subresource (actions.ts); `user` is who asked, for the verb's Event. */
  act(namespace: string, name: string, subresource: string, body: unknown, _w: string[], user?: string) {
    return this.actions.act(namespace, name, subresource, body, user);
  }

  create(req: CreateRequest) {
    return this.creator.create(req);
  }

  /** Release on the owning node; the sandbox is gone for readers at once. */
  async delete(namespace: string, name: string, opts: { uid?: string; dryRun: boolean }): Promise<Sandbox> {
    const e = this.get(namespace, name);
    if (opts.uid && opts.uid !== e.uid)
      throw conflict(
        SANDBOXES,
        name,
        `the UID in the precondition (${opts.uid}) does not match the UID in record (${e.uid}). The object might have been deleted and then recreated`,
      );
    if (opts.dryRun) return toSandbox(e);
    try {
      await this.client.release(e.node, e.address, e.claimId);
    } catch (err) {
      if (err instanceof NodeHttpError) {
        // The node refuses a release while the sandbox is busy (a fork or checkpoint of it in flight): the caller's
        // to retry, as a Conflict, not the server's fault.
        if (err.status === 409) throw conflict(SANDBOXES, name, `node ${e.node}: ${err.message}; retry the delete`);
        throw internalError(`releasing ${e.claimId} on node ${e.node}: ${err.message}`);
      }
      throw serviceUnavailable(`node ${e.node} is unreachable (${(err as Error).message}); retry the delete`, 2);
    }
    const gone = this.store.remove(e.claimId, { tombstone: true }) ?? e;
    this.log.debug({ sandbox: e.key, claim: e.claimId, node: e.node }, 'released');
    return toSandbox(gone);
  }

  bookmark(rv: string, initialEventsEnd: boolean): unknown {
    return {
      kind: 'Sandbox',
      apiVersion: SANDBOX_API_VERSION,
      metadata: {
        resourceVersion: rv,
        ...(initialEventsEnd ? { annotations: { 'k8s.io/initial-events-end': 'true' } } : {}),
      },
    };
  }

  private encodeContinue(after: string): string {
    const t: ContinueToken = { v: 1, boot: this.store.log.versions.boot.toString(), after };
    return Buffer.from(JSON.stringify(t)).toString('base64url');
  }

  /**
   * A continue token names the last key served, so the next page starts after it in the live index: it survives
   * any change to the fleet (no snapshot to expire), at the price of pages that are not one consistent snapshot.
   * A token from another incarnation is 410, as an expired token is upstream.
   */
  private decodeContinue(token: string): string {
    let t: ContinueToken;
    try {
      t = JSON.parse(Buffer.from(token, 'base64url').toString('utf8')) as ContinueToken;
    } catch {
      throw badRequest('invalid continue token');
    }
    if (t?.v !== 1 || typeof t.after !== 'string') throw badRequest('invalid continue token');
    if (t.boot !== this.store.log.versions.boot.toString())
      throw expired(
        'The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.',
      );
    return t.after;
  }
}
