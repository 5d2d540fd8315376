/**
 * Guest images built ahead of time into a directory (a container image, a read-only install): `exportGuestImages`
 * copies each template's kernel, initramfs and root filesystem there with an images.json naming them and their
 * hashes; with SBX_GUEST_IMAGES set to that directory, `ensureGuestImage` serves templates from it and builds
 * nothing (the build needs Go, the kernel source and apt, which a runtime image leaves out).
 */
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { SandboxError } from '../errors.js';
import type { GuestImageArtifact, GuestTemplateDef } from './images.js';

export const PREBUILT_ENV = 'SBX_GUEST_IMAGES';
const MANIFEST = 'images.json';

interface Manifest {
  templates: Record<string, { kernel: string; initramfs: string; rootfs?: string; hash: string }>;
}

export function prebuiltDir(): string | undefined {
  return process.env[PREBUILT_ENV] || undefined;
}

/**
 * Copy every built image into `dir`. Templates share one kernel and one initramfs in the build cache; each cached
 * file is copied once (named after the first template's hash) and shared in the manifest, which keeps two copies of
 * each out of the sandboxd image (~45 MB).
 */
export function exportGuestImages(dir: string, images: readonly GuestImageArtifact[]): string {
  mkdirSync(dir, { recursive: true });
  const manifest: Manifest = { templates: {} };
  const copied = new Map<string, string>();
  const copy = (path: string, hash: string, kind: string) => {
    const known = copied.get(path);
    if (known) return known;
    const name = `${kind}-${hash}`;
    copyFileSync(path, join(dir, name));
    copied.set(path, name);
    return name;
  };
  for (const img of images) {
    manifest.templates[img.def.name] = {
      kernel: copy(img.kernel, img.hash, 'vmlinux'),
      initramfs: copy(img.initramfs, img.hash, 'initramfs'),
      ...(img.rootfs ? { rootfs: copy(img.rootfs, img.hash, 'rootfs') } : {}),
      hash: img.hash,
    };
  }
  const path = join(dir, MANIFEST);
  writeFileSync(path, `${JSON.stringify(manifest, null, 2)}\n`);
  return path;
}

export function prebuiltGuestImage(dir: string, def: GuestTemplateDef): GuestImageArtifact {
  let manifest: Manifest;
  try {
    manifest = JSON.parse(readFileSync(join(dir, MANIFEST), 'utf8')) as Manifest;
  } catch (err) {
    throw new SandboxError(
      'guest.prebuilt-missing',
      `${PREBUILT_ENV}=${dir}: cannot read ${MANIFEST}: ${(err as Error).message}`,
      {
        hint: 'export the images with `node --import tsx scripts/build-guest-images.ts --export <dir>`, or unset it to build them',
      },
    );
  }
  const t = manifest.templates[def.name];
  if (!t)
    throw new SandboxError(
      'guest.prebuilt-missing',
      `template ${def.name} is not among the prebuilt images in ${dir}`,
      {
        hint: `prebuilt: ${Object.keys(manifest.templates).join(', ') || 'none'}; rebuild the image with it`,
      },
    );
  return {
    kernel: join(dir, t.kernel),
    initramfs: join(dir, t.initramfs),
    ...(t.rootfs ? { rootfs: join(dir, t.rootfs), rootfsType: 'ext4' as const } : {}),
    hash: t.hash,
    def,
  };
}
