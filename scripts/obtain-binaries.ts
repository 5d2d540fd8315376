// Builds (or finds in the cache) the pinned etcd / Kubernetes / kwok binaries. Used by scripts/bootstrap.sh so
// the first `npm test` or `npm run up` on a fresh machine shows build progress up front.
import { obtain, obtainAll } from '../src/cluster/binaries.js';
import { readClusterEnvironment } from '../src/cluster/options.js';
import type { ComponentName } from '../src/cluster/versions.js';
import { errorMessage } from '../src/errors.js';

const env = readClusterEnvironment();
const opts = { cacheDir: env.cacheDir, binDir: env.binDir, progress: (l: string) => process.stderr.write(`${l}\n`) };
try {
  const names = process.argv.slice(2) as ComponentName[];
  const paths = names.length
    ? Object.assign({}, ...(await Promise.all(names.map((n) => obtain(n, opts)))))
    : await obtainAll(opts);
  for (const [bin, path] of Object.entries(paths)) process.stdout.write(`${bin}\t${path}\n`);
} catch (err) {
  process.stderr.write(`obtain-binaries: ${errorMessage(err)}\n`);
  process.exit(1);
}
