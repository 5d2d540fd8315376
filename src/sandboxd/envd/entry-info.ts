/**
 * The agent's file stat (src/guest FileStat) as envd's EntryInfo: type enum, size, permission bits and their
 * `ls -l` rendering, owner and group names, modification time, symlink target, metadata (envd 0.6.2).
 */
import type { MessageInitShape } from '@bufbuild/protobuf';
import { timestampFromMs } from '@bufbuild/protobuf/wkt';
import type { FileStat } from '../../guest/index.js';
import { FileType, type EntryInfoSchema } from './gen/filesystem.gen.js';
import type { OwnerNames } from './users.js';

export type EntryInit = MessageInitShape<typeof EntryInfoSchema>;

const TYPES: Record<FileStat['type'], FileType> = {
  file: FileType.FILE,
  dir: FileType.DIRECTORY,
  symlink: FileType.SYMLINK,
  other: FileType.UNSPECIFIED,
};

/** `drwxr-xr-x`: the type letter and the nine permission bits (setuid/setgid/sticky as ls shows them). */
export function permissionString(type: FileStat['type'], mode: number): string {
  const t = type === 'dir' ? 'd' : type === 'symlink' ? 'l' : '-';
  let s = t;
  const rwx = ['r', 'w', 'x'];
  for (let i = 8; i >= 0; i--) s += mode & (1 << i) ? rwx[(8 - i) % 3] : '-';
  return s;
}

/**
 * `link`: for a symlink, where it leads (absolute) and what is there, if anything; the entry then takes the type and
 * permission bits of that, as envd's does. Without it a symlink is reported as itself, with the target as the link
 * says it (what listings, which stat nothing further, show).
 */
export function entryInfo(st: FileStat, names: OwnerNames, link?: { path: string; stat?: FileStat }): EntryInit {
  const name = st.path === '/' ? '/' : st.path.slice(st.path.lastIndexOf('/') + 1);
  const shown = link ? link.stat : st;
  const mode = link ? (link.stat?.mode ?? 0) : st.mode;
  const target = link ? link.path : st.target;
  return {
    name,
    type: shown ? (TYPES[shown.type] ?? FileType.UNSPECIFIED) : FileType.UNSPECIFIED,
    path: st.path,
    size: BigInt(st.size),
    mode,
    permissions: permissionString(st.type, st.mode),
    owner: names.user(st.uid),
    group: names.group(st.gid),
    modifiedTime: timestampFromMs(st.mtimeMs),
    ...(target !== undefined ? { symlinkTarget: target } : {}),
    // The agent reads a symlink's through the link, so it is its target's, as the type and mode above.
    metadata: st.metadata ?? {},
    // The link itself, whose type above is its target's: newer SDKs (Python 2.63) report it as a symlink by this.
    isSymlink: st.type === 'symlink',
  };
}
