/**
 * Read-only root filesystems from Debian packages, without root privileges or maintainer scripts:
 * resolve the dependency closure with apt-cache, `apt-get download` the .debs, unpack them with
 * dpkg-deb into a merged-/usr tree, apply the few fixups maintainer scripts would have done, and pack
 * the tree into an ext4 image with `mke2fs -d`. In the guest it is mounted read-only under a tmpfs
 * overlay (the per-VM copy-on-write layer).
 */
import { execFileSync } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
  appendFileSync,
  statSync,
  lstatSync,
  chownSync,
} from 'node:fs';
import { join } from 'node:path';
import { SandboxError } from '../../errors.js';
import { cachedArtifact, contentHash, runStep, type Progress } from './cache.js';

export interface RootfsArtifact {
  path: string;
  hash: string;
  packages: string[];
}

/** Needed only to install packages (maintainer scripts, alternatives), never at run time. */
const EXCLUDE = new Set([
  'usrmerge',
  'usr-is-merged',
  'cdebconf',
  'libdebian-installer4',
  'libnewt0.52',
  'libslang2',
  'libtextwrap1',
  'original-awk',
  'gawk',
  'libelogind0',
  'perl',
  'perl-modules-5.36',
  'libperl5.36',
  'libfile-find-rule-perl',
  'libnumber-compare-perl',
  'libtext-glob-perl',
  'install-info',
  'debconf',
  'libgdbm-compat4',
  'mime-support',
  'dpkg',
  'init-system-helpers',
]);

function resolveClosure(packages: readonly string[]): { name: string; version: string }[] {
  let out: string;
  try {
    out = execFileSync(
      'apt-cache',
      [
        'depends',
        '--recurse',
        '--no-recommends',
        '--no-suggests',
        '--no-conflicts',
        '--no-breaks',
        '--no-replaces',
        '--no-enhances',
        ...packages,
      ],
      { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], maxBuffer: 64 << 20 },
    );
  } catch (err) {
    throw new SandboxError('guest.rootfs-resolve', `cannot resolve Debian packages ${packages.join(' ')}`, {
      cause: err,
      hint: 'run apt-get update, then retry',
    });
  }
  const names = [
    ...new Set(
      out
        .split('\n')
        .filter((l) => /^[a-z0-9]/.test(l))
        .map((l) => l.trim()),
    ),
  ]
    .filter((n) => !EXCLUDE.has(n))
    .sort();
  const policy = execFileSync('apt-cache', ['policy', ...names], { encoding: 'utf8', maxBuffer: 64 << 20 });
  const versions = new Map<string, string>();
  let cur = '';
  for (const line of policy.split('\n')) {
    const m = /^(\S+):$/.exec(line);
    if (m?.[1]) cur = m[1];
    const c = /^\s+Candidate: (\S+)/.exec(line);
    if (c?.[1] && cur) versions.set(cur, c[1]);
  }
  return names
    .filter((n) => versions.get(n) && versions.get(n) !== '(none)')
    .map((n) => ({ name: n, version: versions.get(n)! }));
}

export async function ensureRootfs(
  packages: readonly string[],
  opts: { progress?: Progress } = {},
): Promise<RootfsArtifact> {
  const closure = resolveClosure(packages);
  const hash = contentHash([
    'rootfs-v1',
    readFileSync(new URL(import.meta.url)),
    ...packages,
    ...closure.map((p) => `${p.name}=${p.version}`),
  ]);
  const dir = await cachedArtifact(
    'rootfs',
    hash,
    async (tmp) => {
      const debs = join(tmp, 'debs');
      const root = join(tmp, 'root');
      mkdirSync(debs, { recursive: true });
      mkdirSync(join(root, 'usr'), { recursive: true });
      for (const d of ['bin', 'sbin', 'lib', 'lib64']) {
        mkdirSync(join(root, 'usr', d), { recursive: true });
        symlinkSync(`usr/${d}`, join(root, d));
      }
      opts.progress?.(`rootfs: downloading ${closure.length} Debian packages`);
      await runStep('rootfs', 'apt-get', ['download', '-q', ...closure.map((p) => `${p.name}=${p.version}`)], {
        cwd: debs,
        progress: opts.progress,
      });
      opts.progress?.('rootfs: unpacking');
      for (const f of readdirSync(debs)
        .filter((f) => f.endsWith('.deb'))
        .sort()) {
        await runStep(
          'rootfs',
          'sh',
          ['-c', `dpkg-deb --fsys-tarfile "${join(debs, f)}" | tar -x --keep-directory-symlink -C "${root}"`],
          { progress: opts.progress },
        );
      }
      fixups(root);
      rmSync(debs, { recursive: true, force: true });
      const kb = Number(execFileSync('du', ['-sk', '--apparent-size', root], { encoding: 'utf8' }).split('\t')[0]);
      const sizeMiB = Math.ceil((kb * 1.25) / 1024) + 32;
      opts.progress?.(`rootfs: mke2fs ${sizeMiB} MiB`);
      await runStep(
        'rootfs',
        'mke2fs',
        [
          '-q',
          '-t',
          'ext4',
          '-O',
          '^has_journal',
          '-m',
          '0',
          '-L',
          'sbxroot',
          '-U',
          'clear',
          '-E',
          'root_owner=0:0,hash_seed=00000000-0000-0000-0000-000000000000',
          '-d',
          root,
          join(tmp, 'rootfs.ext4'),
          `${sizeMiB}M`,
        ],
        {
          env: { ...process.env, E2FSPROGS_FAKE_TIME: '1' },
          progress: opts.progress,
        },
      );
      writeFileSync(join(tmp, 'packages.txt'), closure.map((p) => `${p.name} ${p.version}`).join('\n') + '\n');
      rmSync(root, { recursive: true, force: true });
    },
    { progress: opts.progress },
  );
  return { path: join(dir, 'rootfs.ext4'), hash, packages: closure.map((p) => p.name) };
}

/** What maintainer scripts would have done, as far as a sandbox needs it. */
function fixups(root: string): void {
  const p = (...s: string[]) => join(root, ...s);
  for (const d of [
    'etc',
    'root',
    'tmp',
    'var/tmp',
    'run',
    'proc',
    'sys',
    'dev',
    'home',
    'etc/ssl/certs',
    'usr/local/bin',
  ])
    mkdirSync(p(d), { recursive: true });
  const link = (target: string, at: string) => {
    try {
      lstatSync(p(at));
    } catch {
      symlinkSync(target, p(at));
    }
  };
  link('dash', 'usr/bin/sh');
  if (existsSync(p('usr/bin/mawk'))) link('mawk', 'usr/bin/awk');
  if (existsSync(p('usr/bin/python3.11'))) link('python3.11', 'usr/bin/python3');
  // python-is-python3 would add only this link (and a dependency on the whole python3 metapackage set).
  if (existsSync(p('usr/bin/python3'))) link('python3', 'usr/bin/python');
  const passwdMaster = p('usr/share/base-passwd/passwd.master');
  writeFileSync(
    p('etc/passwd'),
    existsSync(passwdMaster)
      ? readFileSync(passwdMaster)
      : 'root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n',
  );
  const groupMaster = p('usr/share/base-passwd/group.master');
  writeFileSync(
    p('etc/group'),
    existsSync(groupMaster) ? readFileSync(groupMaster) : 'root:x:0:\ntty:x:5:\nnogroup:x:65534:\n',
  );
  // The e2b API (src/sandboxd/envd) runs commands as `root` or `user` (its default), as e2b's own templates do; both
  // must exist in every template its alias table names, with their homes.
  appendFileSync(p('etc/passwd'), 'user:x:1000:1000:user:/home/user:/bin/bash\n');
  appendFileSync(p('etc/group'), 'user:x:1000:\n');
  mkdirSync(p('home/user'), { recursive: true, mode: 0o755 });
  chownSync(p('home/user'), 1000, 1000);
  if (existsSync(p('usr/bin/sudo'))) sudoForUser(root);
  writeFileSync(p('etc/hostname'), 'sandbox\n');
  writeFileSync(p('etc/hosts'), '127.0.0.1 localhost sandbox\n');
  // ca-certificates: build the bundle update-ca-certificates would have written.
  const caDir = p('usr/share/ca-certificates');
  if (existsSync(caDir)) {
    const bundle = p('etc/ssl/certs/ca-certificates.crt');
    writeFileSync(bundle, '');
    const walk = (d: string) => {
      for (const e of readdirSync(d).sort()) {
        const f = join(d, e);
        if (statSync(f).isDirectory()) walk(f);
        else if (e.endsWith('.crt')) appendFileSync(bundle, readFileSync(f));
      }
    };
    walk(caDir);
  }
  for (const d of ['usr/share/doc', 'usr/share/man', 'usr/share/info', 'usr/share/locale', 'usr/share/lintian'])
    rmSync(p(d), { recursive: true, force: true });
  try {
    execFileSync('/sbin/ldconfig', ['-r', root], { stdio: 'ignore' });
  } catch {
    /* the loader's default paths still work */
  }
}

/**
 * e2b's `user` has passwordless sudo in its templates, and scripts written for e2b rely on it. What sudo's
 * maintainer scripts and pam-auth-update would have written: the sudoers drop-in, shadow entries (pam_unix's account
 * check reads them) and the common PAM stacks /etc/pam.d/sudo includes, as pam-auth-update writes them for pam_unix
 * alone. The setuid bit on /usr/bin/sudo comes from the package (the tree is unpacked as root).
 */
function sudoForUser(root: string): void {
  const p = (...s: string[]) => join(root, ...s);
  mkdirSync(p('etc/sudoers.d'), { recursive: true });
  writeFileSync(p('etc/sudoers.d/user'), 'user ALL=(ALL:ALL) NOPASSWD: ALL\n', { mode: 0o440 });
  writeFileSync(p('etc/shadow'), 'root:*:19000:0:99999:7:::\nuser:*:19000:0:99999:7:::\n', { mode: 0o640 });
  const stacks: Record<string, string> = {
    'common-auth':
      'auth [success=1 default=ignore] pam_unix.so nullok\nauth requisite pam_deny.so\nauth required pam_permit.so\n',
    'common-account':
      'account [success=1 new_authtok_reqd=done default=ignore] pam_unix.so\naccount requisite pam_deny.so\naccount required pam_permit.so\n',
    'common-password':
      'password [success=1 default=ignore] pam_unix.so obscure yescrypt\npassword requisite pam_deny.so\npassword required pam_permit.so\n',
    'common-session':
      'session [default=1] pam_permit.so\nsession requisite pam_deny.so\nsession required pam_permit.so\nsession required pam_unix.so\n',
  };
  stacks['common-session-noninteractive'] = stacks['common-session']!;
  mkdirSync(p('etc/pam.d'), { recursive: true });
  for (const [name, text] of Object.entries(stacks)) writeFileSync(p('etc/pam.d', name), text);
}
