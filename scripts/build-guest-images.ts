// Builds (or finds in the cache) the guest kernel, initramfs and root filesystems of every named template, so the
// first `npm test` / `npm run up` on a fresh machine does this once, up front, with progress — not inside a test.
import { errorMessage } from '../src/errors.js';
import { ensureGuestImage, listGuestTemplates, stderrProgress } from '../src/guest/index.js';

try {
  for (const t of listGuestTemplates()) {
    const img = await ensureGuestImage(t.name, { progress: stderrProgress });
    process.stdout.write(`${t.name}\t${img.hash}\n`);
  }
} catch (err) {
  process.stderr.write(`build-guest-images: ${errorMessage(err)}\n`);
  process.exit(1);
}
