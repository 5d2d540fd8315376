// Builds (or finds in the cache) the guest kernel, initramfs and root filesystems of every named template, so the
// first `npm test` / `npm run up` on a fresh machine does this once, up front, with progress — not inside a test.
// `--export <dir>` also copies them to <dir> for SBX_GUEST_IMAGES (src/guest/prebuilt.ts; the sandboxd image).
import { errorMessage } from '../src/errors.js';
import { ensureGuestImage, listGuestTemplates, stderrProgress } from '../src/guest/index.js';
import { exportGuestImages } from '../src/guest/prebuilt.js';

try {
  const exportIndex = process.argv.indexOf('--export');
  const exportDir = exportIndex >= 0 ? process.argv[exportIndex + 1] : undefined;
  if (exportIndex >= 0 && !exportDir) throw new Error('--export needs a directory');
  const images = [];
  for (const t of listGuestTemplates()) {
    const img = await ensureGuestImage(t.name, { progress: stderrProgress });
    images.push(img);
    process.stdout.write(`${t.name}\t${img.hash}\n`);
  }
  if (exportDir) process.stderr.write(`exported to ${exportGuestImages(exportDir, images)}\n`);
} catch (err) {
  process.stderr.write(`build-guest-images: ${errorMessage(err)}\n`);
  process.exit(1);
}
