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
  // Events are delivered in order even when an entry has to be looked up first.
  let chain = Promise.resolve();
  const handle = await agent.files
    .watch(
      spec.path,
      (e) => {
        const name = e.path.startsWith(prefix) ? e.path.slice(prefix.length) : e.path;
        const base = { name, type: TYPES[e.op] ?? EventType.UNSPECIFIED };
        // No link of the chain may reject: nothing awaits it, so a rejection would be unhandled, and that ends
        // sandboxd (a guest agent, which is not trusted, can answer a stat with values entryInfo throws on).
        if (!names || e.op === 'remove') {
          chain = chain.then(() => onEvent(base)).catch(() => undefined);
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
          .catch(() => undefined);
      },
      { recursive: spec.recursive },
    )
    .catch((err: unknown) => {
      throw toConnectError(err);
    });
  return handle;
}

const MAX_BUFFERED = 10_000;
/**
 * Polled watchers one sandbox may hold: each buffers up to MAX_BUFFERED events in sandboxd's memory, shared by every
 * sandbox of the node, and never expires on its own (e2b's SDK removes its watchers).
 */
export const MAX_WATCHERS = 64;

/** Polled watchers of one sandbox: events buffered until fetched (at most 10 000; older ones are dropped). */
export class Watchers {
  private readonly byId = new Map<string, { events: FsEventInit[]; close(): Promise<void>; lost: number }>();
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
        if (w.events.length >= MAX_BUFFERED) {
          w.events.shift();
          w.lost++;
        }
        w.events.push(e);
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
    return out;
  }

  async remove(id: string): Promise<void> {
    const w = this.byId.get(id);
    if (!w) throw new ConnectError(`watcher ${id} not found`, Code.NotFound);
    this.byId.delete(id);
    await w.close();
  }

  closeAll(): void {
    for (const w of this.byId.values()) void w.close();
    this.byId.clear();
  }
}
