/**
 * The guest's users, as envd runs commands and file operations on their behalf: a name from the request
 * (`Authorization: Basic base64("<user>:")` on RPCs, `?username=` on /files) or the default user (`user` where the
 * template has it, as e2b's templates do; else root), looked up in the guest's /etc/passwd. Relative paths and
 * `~` resolve against the user's home, like envd's.
 */
import { Code, ConnectError } from '@connectrpc/connect';
import type { AgentClient } from '../../guest/index.js';

export interface GuestUser {
  name: string;
  uid: number;
  gid: number;
  home: string;
}

export const DEFAULT_USER = 'user';

/** The passwd table per agent session (a restored VM gets a new session, and its table is read again). */
const tables = new WeakMap<AgentClient, Promise<Map<string, GuestUser>>>();

function parsePasswd(text: string): Map<string, GuestUser> {
  const users = new Map<string, GuestUser>();
  for (const line of text.split('\n')) {
    const f = line.split(':');
    if (f.length < 7 || !f[0]) continue;
    const uid = Number(f[2]);
    const gid = Number(f[3]);
    if (!Number.isInteger(uid) || !Number.isInteger(gid)) continue;
    users.set(f[0], { name: f[0], uid, gid, home: f[5] || '/' });
  }
  return users;
}

async function passwd(agent: AgentClient): Promise<Map<string, GuestUser>> {
  let t = tables.get(agent);
  if (!t) {
    t = agent.files.read('/etc/passwd', { maxBytes: 1 << 20 }).then(
      (b) => parsePasswd(b.toString('utf8')),
      // busybox-only templates have no passwd: root is all there is.
      () => new Map([['root', { name: 'root', uid: 0, gid: 0, home: '/root' }]]),
    );
    tables.set(agent, t);
  }
  return t;
}

/** The user a request names (or the default), or a Connect error naming what exists. */
export async function resolveUser(agent: AgentClient, name: string | undefined): Promise<GuestUser> {
  const users = await passwd(agent);
  if (!name) return users.get(DEFAULT_USER) ?? users.get('root') ?? { name: 'root', uid: 0, gid: 0, home: '/' };
  const u = users.get(name);
  if (!u)
    throw new ConnectError(
      `user "${name}" does not exist in the sandbox (users: ${[...users.keys()].filter((n) => n === 'root' || n === DEFAULT_USER).join(', ')})`,
      Code.InvalidArgument,
    );
  return u;
}

/** The user named by an RPC's `Authorization: Basic base64("<user>:")`, if any. */
export function basicAuthUser(header: string | null | undefined): string | undefined {
  const m = /^Basic\s+(\S+)$/i.exec(header ?? '');
  if (!m?.[1]) return undefined;
  const decoded = Buffer.from(m[1], 'base64').toString('utf8');
  const i = decoded.indexOf(':');
  return (i >= 0 ? decoded.slice(0, i) : decoded) || undefined;
}

/** An absolute path: `~` and relative paths resolve against the user's home; empty or NUL-bearing paths refused. */
export function resolvePath(path: string, user: GuestUser): string {
  if (path === '') throw new ConnectError('path: must not be empty', Code.InvalidArgument);
  if (path.includes('\0')) throw new ConnectError('path: must not contain a NUL byte', Code.InvalidArgument);
  let p = path;
  if (p === '~') p = user.home;
  else if (p.startsWith('~/')) p = `${user.home}/${p.slice(2)}`;
  else if (!p.startsWith('/')) p = `${user.home}/${p}`;
  // Normalise `.`/`..`/`//` the way the guest's kernel would read them, so events and entries name one path.
  const parts: string[] = [];
  for (const seg of p.split('/')) {
    if (seg === '' || seg === '.') continue;
    if (seg === '..') parts.pop();
    else parts.push(seg);
  }
  return `/${parts.join('/')}`;
}

/** Names of uids and gids (EntryInfo.owner / group), from the guest's /etc/passwd and /etc/group. */
export interface OwnerNames {
  user(uid: number | undefined): string;
  group(gid: number | undefined): string;
}

const groupTables = new WeakMap<AgentClient, Promise<Map<number, string>>>();

export async function ownerNames(agent: AgentClient): Promise<OwnerNames> {
  const users = await passwd(agent);
  let g = groupTables.get(agent);
  if (!g) {
    g = agent.files.read('/etc/group', { maxBytes: 1 << 20 }).then(
      (b) => {
        const m = new Map<number, string>();
        for (const line of b.toString('utf8').split('\n')) {
          const f = line.split(':');
          if (f.length >= 3 && f[0] && /^\d+$/.test(f[2] ?? '')) m.set(Number(f[2]), f[0]);
        }
        return m;
      },
      () => new Map([[0, 'root']]),
    );
    groupTables.set(agent, g);
  }
  const groups = await g;
  const byUid = new Map([...users.values()].map((u) => [u.uid, u.name]));
  return {
    user: (uid) => (uid === undefined ? '' : (byUid.get(uid) ?? String(uid))),
    group: (gid) => (gid === undefined ? '' : (groups.get(gid) ?? String(gid))),
  };
}
