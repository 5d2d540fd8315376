/**
 * The project's own images (sandbox-operator, sandbox-apiserver, sandboxd) as archives a real node's containerd
 * imports (`ctr -n k8s.io images import`), so the Helm chart's default image names run with pullPolicy
 * IfNotPresent and no registry. Built by scripts/build-images.sh (buildah, deploy/images/Dockerfile) into
 * `<cacheDir>/images/components-<key>/`, where the key hashes everything the images are made of: src/, the npm
 * lockfile, the Dockerfile, the build script and the guest images' own content hashes. A second call with the same
 * inputs costs the hashing (about 5 s, most of it the guest root filesystems' apt-cache lookups); a changed input
 * rebuilds in about a minute (buildah's layer cache keeps the base, npm ci, QEMU and the guest images).
 */
import { spawn } from 'node:child_process';
import { createWriteStream, existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DEFAULT_VALUES } from '../deploy/values.js';
import { SandboxError } from '../errors.js';
import { cachedArtifact, contentHash, type Progress } from '../guest/build/cache.js';
import { ensureGuestImage, listGuestTemplates, type GuestImageArtifact } from '../guest/images.js';
import { exportGuestImages } from '../guest/prebuilt.js';
import { isAlive, withFileLock } from './file-lock.js';
import type { NodeImage } from './node-images.js';

export const IMAGE_COMPONENTS = ['operator', 'apiserver', 'sandboxd'] as const;
export type ImageComponent = (typeof IMAGE_COMPONENTS)[number];

const REPO = fileURLToPath(new URL('../../', import.meta.url));
const SCRIPT = 'scripts/build-images.sh';
/** The files outside src/ that shape the images (the Dockerfile's COPY sources, the build itself). */
const INPUT_FILES = [
  'package.json',
  'package-lock.json',
  'tsconfig.json',
  'tsconfig.build.json',
  '.dockerignore',
  'deploy/images/Dockerfile',
  SCRIPT,
];

export interface ComponentImagesOptions {
  cacheDir: string;
  progress?: Progress;
  /**
   * Make the Node base locally (SBX_LOCAL_BASES=1: mmdebstrap + this machine's Node.js) instead of pulling the
   * pinned docker.io/library/node image. Default true: the local platform works where no registry is reachable.
   */
  localBases?: boolean;
}

/**
 * The name a node's CRI gives an image reference: Docker's short-name rules (distribution/reference
 * ParseDockerRef), so `sandboxd:0.1.0` is `docker.io/library/sandboxd:0.1.0`. The archives carry this name, or
 * the chart's default would not match what containerd holds.
 */
export function normalizeImageName(ref: string): string {
  const slash = ref.indexOf('/');
  const first = slash < 0 ? '' : ref.slice(0, slash);
  const hasDomain = first.includes('.') || first.includes(':') || first === 'localhost';
  const named = hasDomain ? ref : `docker.io/${slash < 0 ? 'library/' : ''}${ref}`;
  const last = named.slice(named.lastIndexOf('/') + 1);
  return named.includes('@') || last.includes(':') ? named : `${named}:latest`;
}

/** Each component's image as the chart's default values name it, normalised (what the archive is imported as). */
export function chartImageNames(): Record<ImageComponent, string> {
  const { operator, apiserver, sandboxd } = DEFAULT_VALUES.images;
  return {
    operator: normalizeImageName(operator),
    apiserver: normalizeImageName(apiserver),
    sandboxd: normalizeImageName(sandboxd),
  };
}

function filesUnder(dir: string, rel = ''): string[] {
  return readdirSync(join(dir, rel), { withFileTypes: true })
    .sort((a, b) => a.name.localeCompare(b.name))
    .flatMap((e) => {
      const path = rel ? `${rel}/${e.name}` : e.name;
      if (e.isDirectory()) return filesUnder(dir, path);
      return e.isFile() ? [path] : [];
    });
}

/** The cache key: every byte the images are built from, plus the guest images' own content hashes. */
export function componentImagesKey(guest: readonly GuestImageArtifact[], localBases: boolean): string {
  const files = [...INPUT_FILES, ...filesUnder(join(REPO, 'src')).map((f) => `src/${f}`)];
  return contentHash([
    'component-images-v1',
    `local-bases=${localBases}`,
    // A local base is this machine's Node.js, so its version is an input too.
    localBases ? process.version : '',
    ...guest.map((g) => `${g.def.name}=${g.hash}`),
    ...files.flatMap((f) => [f, readFileSync(join(REPO, f))]),
  ]);
}

/**
 * Remove the other `<prefix>-*` cache entries beside `keep` (each is hundreds of MB) and the temp dirs of builds
 * that died; while another process is building one (a live lock or temp dir), leave them all alone.
 */
function pruneSiblings(root: string, prefix: string, keep: string): void {
  const entries = readdirSync(root).filter((e) => e.startsWith(`${prefix}-`));
  const owner = (e: string): number | undefined => {
    if (e.endsWith('.lock')) {
      try {
        return Number(readFileSync(join(root, e), 'utf8')) || undefined;
      } catch {
        return undefined; // released meanwhile
      }
    }
    const tmp = /\.tmp-(\d+)$/.exec(e);
    return tmp ? Number(tmp[1]) : undefined;
  };
  if (
    entries.some((e) => {
      const pid = owner(e);
      return pid !== undefined && pid !== process.pid && isAlive(pid);
    })
  )
    return;
  for (const e of entries)
    if (join(root, e) !== keep && !e.endsWith('.lock')) rmSync(join(root, e), { recursive: true, force: true });
}

/** Run scripts/build-images.sh; its `[build-images]` lines are progress, all its output goes to `log`. */
function runBuildScript(args: string[], env: NodeJS.ProcessEnv, log: string, progress: Progress): Promise<void> {
  return new Promise((resolve, reject) => {
    const out = createWriteStream(log);
    const child = spawn('bash', [SCRIPT, ...args], { cwd: REPO, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let tail = '';
    let partial = '';
    child.stdout.pipe(out, { end: false });
    child.stderr.on('data', (d: Buffer) => {
      out.write(d);
      tail = (tail + d.toString()).slice(-4000);
      const lines = (partial + d.toString()).split('\n');
      partial = lines.pop() ?? '';
      for (const l of lines) if (l.startsWith('[build-images]')) progress(`images: ${l.slice(15)}`);
    });
    const fail = (what: string) =>
      new SandboxError('cluster.image', `${SCRIPT} ${what}; the end of ${log}:\n${tail.trim().slice(-1500)}`, {
        hint: 'run scripts/bootstrap.sh (buildah, mmdebstrap), then the script by hand to see the whole build',
      });
    child.on('error', (e) => out.end(() => reject(fail(`cannot run: ${e.message}`))));
    child.on('close', (code, signal) =>
      out.end(() => (code === 0 ? resolve() : reject(fail(`failed (${signal ?? `exit ${code}`})`)))),
    );
  });
}

/**
 * Build, or find in the cache, the three component images as archives named as the chart's defaults resolve
 * (chartImageNames). The guest images the sandboxd image holds are built or taken from their own cache first.
 */
export async function ensureComponentImages(opts: ComponentImagesOptions): Promise<Record<ImageComponent, NodeImage>> {
  const progress = opts.progress ?? (() => undefined);
  const localBases = opts.localBases ?? true;
  if (!existsSync(join(REPO, SCRIPT)))
    throw new SandboxError('cluster.image', `${join(REPO, SCRIPT)} not found: the images build from a checkout`, {
      hint: 'run from the repository (npm run up / npm test), not from an installed package',
    });
  const root = join(opts.cacheDir, 'images');
  const guest: GuestImageArtifact[] = [];
  for (const t of listGuestTemplates()) guest.push(await ensureGuestImage(t.name, { progress }));
  const key = componentImagesKey(guest, localBases);
  const names = chartImageNames();
  // Beside the cache entries, not in the build's temp dir, which a failed build removes.
  const log = join(root, 'build-images.log');
  const dir = await cachedArtifact(
    'components',
    key,
    async (tmp) => {
      // The guest images as the sandboxd image holds them, exported once per guest content (255 MB of copies).
      const guestDir = await cachedArtifact(
        'guest-export',
        contentHash(guest.map((g) => `${g.def.name}=${g.hash}`)),
        (gtmp) => Promise.resolve(void exportGuestImages(gtmp, guest)),
        { root, progress },
      );
      const env = { ...process.env, SBX_CACHE_DIR: opts.cacheDir, SBX_LOCAL_BASES: localBases ? '1' : '' };
      // One buildah build at a time on this machine: a concurrent build with other sources would retag the
      // images between this build and its push.
      await withFileLock(join(root, 'build-images.lock'), progress, () =>
        runBuildScript(['--archive-dir', tmp, '--guest-dir', guestDir], env, log, progress),
      );
      for (const c of IMAGE_COMPONENTS)
        if (!existsSync(join(tmp, `${c}.tar`)))
          throw new SandboxError('cluster.image', `${SCRIPT} wrote no ${c}.tar`, { hint: `see ${log}` });
      pruneSiblings(root, 'guest-export', guestDir);
    },
    { root, progress },
  );
  pruneSiblings(root, 'components', dir);
  const image = (c: ImageComponent): NodeImage => ({ name: names[c], archive: join(dir, `${c}.tar`) });
  return { operator: image('operator'), apiserver: image('apiserver'), sandboxd: image('sandboxd') };
}
