import { execFileSync } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { SandboxError } from '../../errors.js';
import { ensureAgent } from './agent.js';
import { cachedArtifact, contentHash, runStep, type Progress } from './cache.js';
import { ASSETS, debVersion } from './kernel.js';

const BUSYBOX = '/bin/busybox';

export interface InitramfsArtifact {
  path: string;
  hash: string;
}

/** busybox-static + /init + the agent, as an uncompressed newc cpio (faster to unpack under TCG). */
export async function ensureInitramfs(opts: { progress?: Progress } = {}): Promise<InitramfsArtifact> {
  if (!existsSync(BUSYBOX) || debVersion('busybox-static') === '') {
    throw new SandboxError('guest.busybox-missing', 'busybox-static is needed for the guest initramfs', {
      hint: 'install the Debian package busybox-static (scripts/bootstrap.sh does this)',
    });
  }
  const agent = await ensureAgent(opts);
  const initScript = readFileSync(join(ASSETS, 'init.sh'));
  const hash = contentHash([
    'initramfs-v1',
    debVersion('busybox-static'),
    agent.hash,
    initScript,
    readFileSync(new URL(import.meta.url)),
  ]);
  const dir = await cachedArtifact(
    'initramfs',
    hash,
    async (tmp) => {
      const root = join(tmp, 'root');
      for (const d of ['bin', 'sbin', 'dev', 'proc', 'sys', 'tmp', 'etc', 'root', 'usr/bin', 'usr/sbin'])
        mkdirSync(join(root, d), { recursive: true });
      copyFileSync(BUSYBOX, join(root, 'bin/busybox'));
      chmodSync(join(root, 'bin/busybox'), 0o755);
      const applets = execFileSync(BUSYBOX, ['--list-full'], { encoding: 'utf8' }).split('\n').filter(Boolean);
      for (const a of applets) {
        const target = join(root, a);
        if (a === 'bin/busybox' || existsSync(target)) continue;
        mkdirSync(join(target, '..'), { recursive: true });
        symlinkSync('/bin/busybox', target);
      }
      copyFileSync(agent.binary, join(root, 'sbin/sandbox-agent'));
      chmodSync(join(root, 'sbin/sandbox-agent'), 0o755);
      writeFileSync(join(root, 'init'), initScript, { mode: 0o755 });
      writeFileSync(
        join(root, 'etc/passwd'),
        'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n',
      );
      writeFileSync(join(root, 'etc/group'), 'root:x:0:\ntty:x:5:\nnogroup:x:65534:\n');
      // Reproducible archive: sorted names, fixed mtimes, root ownership.
      await runStep(
        'initramfs',
        'sh',
        [
          '-c',
          `cd "${root}" && find . -exec touch -h -d @0 {} + && find . | LC_ALL=C sort | cpio --quiet -o -H newc -R 0:0 --reproducible > "${join(tmp, 'initramfs.cpio')}"`,
        ],
        {
          progress: opts.progress,
        },
      );
      execFileSync('rm', ['-rf', root]);
    },
    { progress: opts.progress },
  );
  return { path: join(dir, 'initramfs.cpio'), hash };
}
