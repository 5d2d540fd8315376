/**
 * envd's `filesystem.Filesystem` service over the guest agent: Stat, MakeDir, Move, ListDir, Remove, the streamed
 * WatchDir, and the polled watchers. Paths resolve like envd's (relative to the acting user's home); directories
 * the acting user creates are theirs.
 */
import { Code, ConnectError, type ServiceImpl } from '@connectrpc/connect';
import { posix } from 'node:path';
import type { AgentClient, FileStat } from '../../guest/index.js';
import { entryInfo } from './entry-info.js';
import { toConnectError } from './errors.js';
import { EventQueue } from './event-queue.js';
import { Filesystem } from './gen/filesystem.gen.js';
import { acting, keepaliveMs } from './request-context.js';
import { ownerNames, resolvePath } from './users.js';
import { eventBytes, watch, Watchers, type FsEventInit } from './watchers.js';

async function agentCall<T>(p: Promise<T>): Promise<T> {
  try {
    return await p;
  } catch (err) {
    throw toConnectError(err);
  }
}

async function entryOf(agent: AgentClient, path: string) {
  const [st, names] = await Promise.all([agentCall(agent.files.stat(path)), ownerNames(agent)]);
  if (st.type !== 'symlink') return entryInfo(st, names);
  // A symlink is reported as envd reports it: the link's own name, size and time, with the type and permission bits
  // of what it points at (UNSPECIFIED when dangling) and the target resolved to an absolute path.
  const target = await resolveLink(agent, st.path, st.target);
  return entryInfo(st, names, target);
}

/** Links followed before a chain counts as a loop (Linux's own limit, MAXSYMLINKS). */
const MAX_LINK_HOPS = 40;

/**
 * Where the symlink at `path` leads: its target made absolute (relative to the link's directory) and followed
 * through further links, with the stat of what is there (undefined when dangling or a loop).
 */
async function resolveLink(
  agent: AgentClient,
  path: string,
  target: string | undefined,
): Promise<{ path: string; stat?: FileStat }> {
  let at = path;
  let next = target;
  for (let hop = 0; hop < MAX_LINK_HOPS && next !== undefined; hop++) {
    at = posix.resolve(posix.dirname(at), next);
    const st = await agent.files.stat(at).catch(() => undefined);
    if (!st) return { path: at };
    if (st.type !== 'symlink') return { path: at, stat: st };
    next = st.target;
  }
  return { path: at };
}

type WatchMessage = {
  event:
    | { case: 'start'; value: object }
    | { case: 'filesystem'; value: FsEventInit }
    | { case: 'keepalive'; value: object };
};

export const filesystemService: Partial<ServiceImpl<typeof Filesystem>> = {
  async stat(req, ctx) {
    const { agent, user } = await acting(ctx);
    return { entry: await entryOf(agent, resolvePath(req.path, user)) };
  },

  async makeDir(req, ctx) {
    const { agent, user } = await acting(ctx);
    const path = resolvePath(req.path, user);
    if (await agent.files.exists(path).catch(() => false))
      throw new ConnectError(`${path} already exists`, Code.AlreadyExists);
    await agentCall(agent.files.mkdir(path, { parents: true, uid: user.uid, gid: user.gid }));
    return { entry: await entryOf(agent, path) };
  },

  async move(req, ctx) {
    const { agent, user } = await acting(ctx);
    const from = resolvePath(req.source, user);
    const to = resolvePath(req.destination, user);
    await agentCall(agent.files.move(from, to));
    return { entry: await entryOf(agent, to) };
  },

  async listDir(req, ctx) {
    const { agent, user } = await acting(ctx);
    const path = resolvePath(req.path, user);
    const st = await agentCall(agent.files.stat(path));
    if (st.type !== 'dir') throw new ConnectError(`${path} is not a directory`, Code.InvalidArgument);
    const [{ entries }, names] = await Promise.all([
      agentCall(agent.files.list(path, { depth: Math.max(1, req.depth || 1) })),
      ownerNames(agent),
    ]);
    return { entries: entries.map((e) => entryInfo(e, names)) };
  },

  async remove(req, ctx) {
    const { agent, user } = await acting(ctx);
    // As envd's os.RemoveAll: a path that is not there is removed already (the SDK's recursive watch removes first).
    await agentCall(agent.files.remove(resolvePath(req.path, user), { recursive: true })).catch((err: unknown) => {
      if (!(err instanceof ConnectError && err.code === Code.NotFound)) throw err;
    });
    return {};
  },

  async *watchDir(req, ctx) {
    const { agent, user } = await acting(ctx);
    const queue = new EventQueue<WatchMessage>({
      sizeOf: (m) => (m.event.case === 'filesystem' ? eventBytes(m.event.value) : 0),
      keepalive: { everyMs: keepaliveMs(ctx), item: { event: { case: 'keepalive', value: {} } } },
    });
    const handle = await watch(
      agent,
      {
        path: resolvePath(req.path, user),
        recursive: req.recursive,
        includeEntry: req.includeEntry,
        allowNetworkMounts: req.allowNetworkMounts,
      },
      (e) => void queue.push({ event: { case: 'filesystem', value: e } }),
    );
    handle.done.then(
      () => queue.close(),
      (err: unknown) => queue.close(toConnectError(err)),
    );
    const stop = () => queue.close();
    ctx.signal.addEventListener('abort', stop, { once: true });
    try {
      yield { event: { case: 'start' as const, value: {} } };
      yield* queue;
    } finally {
      ctx.signal.removeEventListener('abort', stop);
      await handle.close();
    }
  },

  async createWatcher(req, ctx) {
    const { sandbox, agent, user } = await acting(ctx);
    sandbox.watchers ??= new Watchers();
    const watcherId = await sandbox.watchers.create(agent, {
      path: resolvePath(req.path, user),
      recursive: req.recursive,
      includeEntry: req.includeEntry,
      allowNetworkMounts: req.allowNetworkMounts,
    });
    return { watcherId };
  },

  async getWatcherEvents(req, ctx) {
    const { sandbox } = await acting(ctx);
    if (!sandbox.watchers) throw new ConnectError(`watcher ${req.watcherId} not found`, Code.NotFound);
    return { events: sandbox.watchers.take(req.watcherId) };
  },

  async removeWatcher(req, ctx) {
    const { sandbox } = await acting(ctx);
    if (!sandbox.watchers) throw new ConnectError(`watcher ${req.watcherId} not found`, Code.NotFound);
    await sandbox.watchers.remove(req.watcherId);
    return {};
  },
};
