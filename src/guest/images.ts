/**
 * Named guest templates (selected like container images: a Pod's `containers[0].image`), and the
 * image (kernel + initramfs + optional read-only rootfs) each one boots.
 */
import { SandboxError } from '../errors.js';
import { contentHash, type Progress } from './build/cache.js';
import { ensureInitramfs } from './build/initramfs.js';
import { ensureKernel } from './build/kernel.js';
import { ensureRootfs } from './build/rootfs.js';
import { prebuiltDir, prebuiltGuestImage } from './prebuilt.js';

export interface GuestTemplateDef {
  name: string;
  description: string;
  /** Debian packages of the read-only root filesystem (none = the initramfs' busybox only). */
  packages?: readonly string[];
  memoryMiB: number;
  network: 'none' | 'egress';
  /** Commands run once in the template VM before the snapshot. */
  warmup?: readonly (readonly string[])[];
  /**
   * The first command a warm pool runs in each of its VMs before a tenant gets one (sandboxd's priming): under TCG a
   * fresh clone's QEMU has translated none of the guest's code yet, and a command's first run pays for that. Default
   * `true` (the agent's exec path only).
   */
  prime?: readonly string[];
}

/**
 * What e2b's SDK runs for every `commands.run`: a login shell (docs/e2b.md "Data plane (envd)"). Priming with it
 * leaves bash, its profile and libraries translated and in the page cache, so an SDK's first command costs what a
 * later one does. It prints, so the guest agent's and the host's output path (stdout frames) are run once too: with
 * `true` a tenant's first `echo hi` still cost ~20 ms more than its second (PERFORMANCE.md, bench/e2b).
 */
const LOGIN_SHELL_PRIME = ['/bin/bash', '-l', '-c', 'echo primed'] as const;

const BASE_PACKAGES = [
  'base-files',
  'bash',
  'coreutils',
  'dash',
  'grep',
  'sed',
  'findutils',
  'gzip',
  'tar',
  'procps',
  'ca-certificates',
  'util-linux',
  'diffutils',
  // What e2b's users expect inside its `base` template (docs/e2b.md "The guest images"): git, python3 (and
  // `python`), sudo for the default user, curl and tput.
  'git',
  'python3',
  'sudo',
  'curl',
  'ncurses-bin',
  'ncurses-base',
];

export const GUEST_TEMPLATES: Readonly<Record<string, GuestTemplateDef>> = {
  'sandbox/minimal': {
    name: 'sandbox/minimal',
    description: 'busybox in the initramfs, no root filesystem, no network',
    memoryMiB: 128,
    network: 'none',
  },
  'sandbox/base': {
    name: 'sandbox/base',
    description:
      'Debian bookworm userland (bash, coreutils, git, python3, sudo, curl, ...), read-only root + tmpfs copy-on-write layer, no network',
    packages: BASE_PACKAGES,
    memoryMiB: 128,
    network: 'none',
    prime: LOGIN_SHELL_PRIME,
  },
  'sandbox/python': {
    name: 'sandbox/python',
    description:
      'sandbox/base on the egress lane (own namespace, NAT on the node), with python3 warmed in its template',
    packages: BASE_PACKAGES,
    memoryMiB: 256,
    network: 'egress',
    warmup: [['python3', '-c', 'import json, os, sys']],
    prime: LOGIN_SHELL_PRIME,
  },
};

/**
 * The command that primes a warm VM (GuestTemplateDef.prime). `vmTemplate` is the VM's template name as sandboxd
 * gives it, `<guest template>@<pool or checkpoint>` (src/sandboxd/warm-pools.ts, engine.ts's checkpoints).
 */
export function primeCommand(vmTemplate: string): readonly string[] {
  const name = vmTemplate.split('@')[0]!;
  return (GUEST_TEMPLATES[name] ?? GUEST_TEMPLATES[name.replace(/:latest$/, '')])?.prime ?? ['true'];
}

export function listGuestTemplates(): GuestTemplateDef[] {
  return Object.values(GUEST_TEMPLATES);
}

export interface GuestImageArtifact {
  kernel: string;
  initramfs: string;
  rootfs?: string;
  rootfsType?: 'ext4';
  hash: string;
  def: GuestTemplateDef;
}

/** Build (or find in the cache) everything a named template boots. */
export async function ensureGuestImage(name: string, opts: { progress?: Progress } = {}): Promise<GuestImageArtifact> {
  const def = GUEST_TEMPLATES[name] ?? GUEST_TEMPLATES[name.replace(/:latest$/, '')];
  if (!def) {
    throw new SandboxError('template.unknown', `unknown template ${name}`, {
      hint: `known templates: ${Object.keys(GUEST_TEMPLATES).join(', ')}`,
    });
  }
  const prebuilt = prebuiltDir();
  if (prebuilt) return prebuiltGuestImage(prebuilt, def);
  const [kernel, initramfs] = await Promise.all([ensureKernel(opts), ensureInitramfs(opts)]);
  if (!def.packages) {
    return {
      kernel: kernel.vmlinux,
      initramfs: initramfs.path,
      hash: contentHash(['image-v1', kernel.hash, initramfs.hash]),
      def,
    };
  }
  const rootfs = await ensureRootfs(def.packages, opts);
  return {
    kernel: kernel.vmlinux,
    initramfs: initramfs.path,
    rootfs: rootfs.path,
    rootfsType: 'ext4',
    hash: contentHash(['image-v1', kernel.hash, initramfs.hash, rootfs.hash]),
    def,
  };
}
