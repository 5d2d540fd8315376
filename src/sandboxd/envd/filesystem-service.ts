/**
 * envd's `filesystem.Filesystem` service over the guest agent: Stat, MakeDir, Move, ListDir, Remove, the streamed
 * WatchDir, and the polled watchers. Paths resolve like envd's (relative to the acting user's home); directories
 * the acting user creates are theirs.
 */
import { Code, ConnectError, type ServiceImpl } from '@connectrpc/connect';
import type { AgentClient } from '../../guest/index.js';
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
  return entryInfo(st, names);
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
    await agentCall(agent.files.remove(resolvePath(req.path, user), { recursive: true }));
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
      { path: resolvePath(req.path, user), recursive: req.recursive, includeEntry: req.includeEntry },
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
