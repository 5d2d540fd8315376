import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { SandboxError } from '../../errors.js';
import { cachedArtifact, contentHash, runStep, type Progress } from './cache.js';

export const ASSETS = fileURLToPath(new URL('./assets/', import.meta.url));
const LINUX_SOURCE_TAR = '/usr/src/linux-source-6.1.tar.xz';

export interface KernelArtifact {
  vmlinux: string;
  config: string;
  hash: string;
}

export function debVersion(pkg: string): string {
  try {
    return execFileSync('dpkg-query', ['-W', '-f=${Version}', pkg], { encoding: 'utf8' }).trim();
  } catch {
    return '';
  }
}

/** Hash of everything that determines the kernel image. */
export function kernelHash(): string {
  return contentHash([
    'kernel-v1',
    readFileSync(join(ASSETS, 'kernel.config')),
    readFileSync(join(ASSETS, 'build-kernel.sh')),
    debVersion('linux-source-6.1'),
  ]);
}

/** The guest kernel (vmlinux, PVH-bootable), built once per input hash (~4-5 min on 2 cores). */
export async function ensureKernel(opts: { progress?: Progress; jobs?: number } = {}): Promise<KernelArtifact> {
  const hash = kernelHash();
  const dir = await cachedArtifact(
    'kernel',
    hash,
    async (tmp) => {
      if (!existsSync(LINUX_SOURCE_TAR)) {
        throw new SandboxError('guest.kernel-source-missing', `${LINUX_SOURCE_TAR} not found`, {
          hint: 'install the Debian package linux-source-6.1 (scripts/bootstrap.sh does this)',
        });
      }
      await runStep(
        'kernel',
        'bash',
        [join(ASSETS, 'build-kernel.sh'), join(ASSETS, 'kernel.config'), tmp, String(Math.min(opts.jobs ?? 2, 2))],
        {
          progress: opts.progress,
        },
      );
    },
    { progress: opts.progress },
  );
  return { vmlinux: join(dir, 'vmlinux'), config: join(dir, 'config'), hash };
}
