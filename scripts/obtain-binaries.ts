// Builds (or finds in the cache) the pinned etcd / Kubernetes / kwok binaries. Used by scripts/bootstrap.sh so
// the first `npm test` or `npm run up` on a fresh machine shows build progress up front.
//   obtain-binaries.ts                the control plane (obtainAll)
//   obtain-binaries.ts --real-nodes   the control plane and what real worker nodes run (kubelet, kube-proxy,
//                                     containerd, CoreDNS)
//   obtain-binaries.ts NAME...        the named components only (e.g. helm)
import { obtain, obtainAll } from '../src/cluster/binaries.js';
import { readClusterEnvironment } from '../src/cluster/options.js';
import { COMPONENTS, REAL_NODE_COMPONENTS, type ComponentName } from '../src/cluster/versions.js';
import { errorMessage } from '../src/errors.js';

const env = readClusterEnvironment();
const opts = { cacheDir: env.cacheDir, binDir: env.binDir, progress: (l: string) => process.stderr.write(`${l}\n`) };
try {
  const args = process.argv.slice(2);
  const realNodes = args.includes('--real-nodes');
  const names = args.filter((a) => a !== '--real-nodes');
  const unknown = names.filter((n) => !(n in COMPONENTS));
  if (unknown.length)
    throw new Error(`unknown component(s) ${unknown.join(', ')}; known: ${Object.keys(COMPONENTS).join(', ')}`);
  let paths: Record<string, string>;
  if (names.length) {
    paths = Object.assign({}, ...(await Promise.all(names.map((n) => obtain(n as ComponentName, opts)))));
  } else {
    paths = await obtainAll(opts);
    // One after the other: each Go build already uses every core.
    if (realNodes) for (const n of REAL_NODE_COMPONENTS) Object.assign(paths, await obtain(n, opts));
  }
  for (const [bin, path] of Object.entries(paths)) process.stdout.write(`${bin}\t${path}\n`);
} catch (err) {
  process.stderr.write(`obtain-binaries: ${errorMessage(err)}\n`);
  process.exit(1);
}
