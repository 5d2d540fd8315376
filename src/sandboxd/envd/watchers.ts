/**
 * Directory watches over the agent's `file.watch` (inotify in the guest), as envd's events: the streamed WatchDir,
 * and the polled watchers (CreateWatcher / GetWatcherEvents / RemoveWatcher) that the Python SDK's sync
 * `watch_dir` uses. An event's `name` is its path relative to the watched directory; with `includeEntry` it
 * carries the entry as it is when the event is delivered (none once the file is gone).
 */
import { randomUUID } from 'node:crypto';
import { Code, ConnectError } from '@connectrpc/connect';
import type { AgentClient, FileStat, WatchEvent } from '../../guest/index.js';
import { entryInfo, type EntryInit } from './entry-info.js';
import { toConnectError } from './errors.js';
import { EventType } from './gen/filesystem.gen.js';
import { ownerNames } from './users.js';

export interface FsEventInit {
  name: string;
  type: EventType;
  entry?: EntryInit;
}

const TYPES: Record<WatchEvent['op'], EventType> = {
  create: EventType.CREATE,
  write: EventType.WRITE,
  remove: EventType.REMOVE,
  rename: EventType.RENAME,
  chmod: EventType.CHMOD,
};

export interface WatchSpec {
  path: string;
  recursive: boolean;
  includeEntry: boolean;
  /** Watch a directory on a network filesystem (NFS, SMB, FUSE), which envd refuses otherwise (envd 0.6.4). */
  allowNetworkMounts?: boolean;
}

/** Start watching; resolves once the guest's watch is in place (errors: not_found, not a directory). */
export async function watch(
  agent: AgentClient,
  spec: WatchSpec,
  onEvent: (e: FsEventInit) => void,
): Promise<{ close(): Promise<void>; done: Promise<void> }> {
  const st = await agent.files.stat(spec.path).catch((err: unknown) => {
    throw toConnectError(err);
  });
  if (st.type !== 'dir') throw new ConnectError(`${spec.path} is not a directory`, Code.InvalidArgument);
  const names = spec.includeEntry ? await ownerNames(agent) : undefined;
  const prefix = spec.path === '/' ? '/' : `${spec.path}/`;
  // Events are delivered in order even when an entry has to be looked up first. Watch events are not
  // flow-controlled, so a guest can send them faster than their entries are looked up: past MAX_LOOKUP_QUEUE events
  // waiting in the chain, new ones are dropped rather than queued without bound.
  let chain = Promise.resolve();
  let queued = 0;
  const handle = await agent.files
    .watch(
      spec.path,
      (e) => {
        if (queued >= MAX_LOOKUP_QUEUE) return;
        queued++;
        const done = () => void queued--;
        const name = e.path.startsWith(prefix) ? e.path.slice(prefix.length) : e.path;
        const base = { name, type: TYPES[e.op] ?? EventType.UNSPECIFIED };
        // No link of the chain may reject: nothing awaits it, so a rejection would be unhandled, and that ends
        // sandboxd (a guest agent, which is not trusted, can answer a stat with values entryInfo throws on).
        if (!names || e.op === 'remove') {
          chain = chain
            .then(() => onEvent(base))
            .catch(() => undefined)
            .finally(done);
          return;
        }
        // `looked` itself never rejects either: it may settle before its link runs, with no handler attached yet.
        const looked = agent.files.stat(e.path).then(
          (s: FileStat) => {
            try {
              return entryInfo(s, names);
            } catch {
              return undefined;
            }
          },
          () => undefined,
        );
        chain = chain
          .then(async () => {
            const entry = await looked;
            onEvent(entry ? { ...base, entry } : base);
          })
          .catch(() => undefined)
          .finally(done);
      },
      { recursive: spec.recursive, allowNetworkMounts: spec.allowNetworkMounts },
    )
    .catch((err: unknown) => {
      throw toConnectError(err);
    });
  return handle;
}

/** Events of one watch waiting for their entries to be looked up. */
const MAX_LOOKUP_QUEUE = 1024;
const MAX_BUFFERED = 10_000;
/** What the polled watchers of one sandbox may buffer in all (a guest path is up to 4 KiB, an entry twice that). */
export const MAX_BUFFERED_BYTES = 8 << 20;

/** About what a buffered event holds in memory. */
export function eventBytes(e: FsEventInit): number {
  const entry = e.entry;
  return 128 + e.name.length + (entry ? 256 + (entry.path?.length ?? 0) + (entry.symlinkTarget?.length ?? 0) : 0);
}

/**
 * Polled watchers one sandbox may hold: each buffers up to MAX_BUFFERED events in sandboxd's memory, shared by every
 * sandbox of the node, and never expires on its own (e2b's SDK removes its watchers).
 */
export const MAX_WATCHERS = 64;

/** Polled watchers of one sandbox: events buffered until fetched (at most 10 000; older ones are dropped). */
export class Watchers {
  private readonly byId = new Map<string, { events: FsEventInit[]; close(): Promise<void>; lost: number }>();
  /** Bytes buffered by all of them (eventBytes). */
  private bytes = 0;
  /** Watchers being created (their guest watch not answered yet); they count against MAX_WATCHERS. */
  private starting = 0;

  async create(agent: AgentClient, spec: WatchSpec): Promise<string> {
    if (this.byId.size + this.starting >= MAX_WATCHERS)
      throw new ConnectError(
        `this sandbox holds ${MAX_WATCHERS} watchers; remove one (RemoveWatcher) before creating another`,
        Code.ResourceExhausted,
      );
    const id = randomUUID();
    const w: { events: FsEventInit[]; lost: number; close: () => Promise<void> } = {
      events: [],
      lost: 0,
      close: async () => undefined,
    };
    this.starting++;
    let handle: Awaited<ReturnType<typeof watch>>;
    try {
      handle = await watch(agent, spec, (e) => {
        const size = eventBytes(e);
        // Oldest first, of this watcher: another watcher's events are not this one's to drop.
        while (w.events.length && (w.events.length >= MAX_BUFFERED || this.bytes + size > MAX_BUFFERED_BYTES)) {
          this.bytes -= eventBytes(w.events.shift()!);
          w.lost++;
        }
        if (this.bytes + size > MAX_BUFFERED_BYTES) {
          w.lost++;
          return;
        }
        w.events.push(e);
        this.bytes += size;
      });
    } finally {
      this.starting--;
    }
    w.close = handle.close;
    this.byId.set(id, w);
    handle.done.then(
      () => undefined,
      () => undefined,
    );
    return id;
  }

  take(id: string): FsEventInit[] {
    const w = this.byId.get(id);
    if (!w) throw new ConnectError(`watcher ${id} not found`, Code.NotFound);
    const out = w.events;
    w.events = [];
    for (const e of out) this.bytes -= eventBytes(e);
    return out;
  }

  async remove(id: string): Promise<void> {
    const w = this.byId.get(id);
    if (!w) throw new ConnectError(`watcher ${id} not found`, Code.NotFound);
    this.byId.delete(id);
    for (const e of w.events) this.bytes -= eventBytes(e);
    w.events = [];
    await w.close();
  }

  closeAll(): void {
    for (const w of this.byId.values()) void w.close();
    this.byId.clear();
    this.bytes = 0;
  }
}
