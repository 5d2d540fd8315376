/** Named templates (`sandbox/base`, ...): build the guest image, then boot + snapshot it once. */
import { ensureGuestImage, type GuestImageArtifact, type Progress } from '../guest/index.js';
import type { QemuMicrovmDriver } from './vm-core.js';
import type { Template, TemplateSpec } from './types.js';

export function templateFromImage(img: GuestImageArtifact): TemplateSpec {
  const image: TemplateSpec['image'] = { kernel: img.kernel, initramfs: img.initramfs, hash: img.hash };
  if (img.rootfs) {
    image.rootfs = img.rootfs;
    image.rootfsType = img.rootfsType ?? 'ext4';
  }
  return { name: img.def.name, image, memoryMiB: img.def.memoryMiB, network: img.def.network, warmup: img.def.warmup };
}

/** Build what is missing (kernel, initramfs, rootfs, snapshot) for a named template, with progress. */
export async function ensureTemplate(
  driver: QemuMicrovmDriver,
  name: string,
  opts: { progress?: Progress } = {},
): Promise<Template> {
  const img = await ensureGuestImage(name, opts);
  return driver.createTemplate(templateFromImage(img), opts);
}
