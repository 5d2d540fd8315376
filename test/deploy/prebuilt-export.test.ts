/**
 * `exportGuestImages` (what the sandboxd image's guest directory is made of): templates that boot the same cached
 * kernel and initramfs share one copy of each in the export, and every template still resolves to its own files
 * and hash through `prebuiltGuestImage`, as sandboxd reads them with SBX_GUEST_IMAGES.
 */
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readdir, readFile, writeFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { GUEST_TEMPLATES, type GuestImageArtifact } from '../../src/guest/images.js';
import { exportGuestImages, prebuiltGuestImage } from '../../src/guest/prebuilt.js';

describe('exportGuestImages', () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sbx-export-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('copies a kernel and initramfs shared by templates once, and each template resolves to its own files', async () => {
    const src = join(dir, 'cache');
    await mkdir(src);
    for (const f of ['vmlinux', 'initramfs', 'rootfs-a', 'rootfs-b']) await writeFile(join(src, f), `${f} bytes`);
    const defs = Object.values(GUEST_TEMPLATES).slice(0, 3);
    assert.equal(defs.length, 3, 'three templates to export');
    const images: GuestImageArtifact[] = defs.map((def, i) => ({
      kernel: join(src, 'vmlinux'),
      initramfs: join(src, 'initramfs'),
      ...(i > 0 ? { rootfs: join(src, i === 1 ? 'rootfs-a' : 'rootfs-b'), rootfsType: 'ext4' as const } : {}),
      hash: `hash${i}`,
      def,
    }));
    const out = join(dir, 'export');
    exportGuestImages(out, images);
    assert.deepEqual(
      (await readdir(out)).sort(),
      ['images.json', 'initramfs-hash0', 'rootfs-hash1', 'rootfs-hash2', 'vmlinux-hash0'],
      'one kernel and one initramfs for three templates',
    );
    for (const [i, def] of defs.entries()) {
      const got = prebuiltGuestImage(out, def);
      assert.equal(got.hash, `hash${i}`);
      assert.equal(await readFile(got.kernel, 'utf8'), 'vmlinux bytes');
      assert.equal(await readFile(got.initramfs, 'utf8'), 'initramfs bytes');
      if (i > 0) assert.equal(await readFile(got.rootfs!, 'utf8'), i === 1 ? 'rootfs-a bytes' : 'rootfs-b bytes');
      else assert.equal(got.rootfs, undefined);
    }
  });
});
