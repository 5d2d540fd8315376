import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { SandboxError } from '../errors.js';
import { cachedArtifact, contentHash, runStep, type Progress } from '../guest/build/cache.js';
import { PAUSE_IMAGE } from './nodes/node-config.js';
import { ociWriterSource, writeOciArchive, type ImageSymlink, type OciImageSpec } from './oci-image.js';

/**
 * The images every real node imports into its containerd at start (no registry is reachable): the pod sandbox
 * ("pause") image the CRI needs for every Pod, and a small busybox image for tests. Each is built once per hash of
 * its inputs into `<cacheDir>/images/<image>-<hash>/<image>.tar` (cachedArtifact: atomic, one builder at a time).
 */

/** A test image from Debian's busybox-static: a shell and the usual tools (nc, wget, httpd, nslookup, ...). */
export const BUSYBOX_TEST_IMAGE = 'localhost/sbx/busybox:1';
/** The pause program's Go module (its own go.mod: nothing of the agent's or the repo's leaks into it). */
export const PAUSE_SRC = fileURLToPath(new URL('./nodes/pause/', import.meta.url));
const BUSYBOX = '/bin/busybox';

export interface NodeImage {
  /** The name containerd imports the archive under. */
  name: string;
  archive: string;
}

const imagesRoot = (cacheDir: string) => join(cacheDir, 'images');
const thisSource = () => readFileSync(new URL(import.meta.url));

function goVersion(): string {
  const res = spawnSync('go', ['version'], { encoding: 'utf8' });
  if (res.error || res.status !== 0)
    throw new SandboxError('cluster.no-go', 'the Go toolchain is needed to build the pause image', {
      hint: 'install Go >= 1.26 (scripts/bootstrap.sh checks for it)',
    });
  return res.stdout.trim();
}

/** Build `spec` (its files may be made in the build's temp dir) once per `hash`; the archive's path. */
async function cachedImage(
  cacheDir: string,
  artifact: string,
  hash: string,
  progress: Progress,
  spec: (tmp: string) => Promise<OciImageSpec>,
): Promise<string> {
  const dir = await cachedArtifact(
    artifact,
    hash,
    async (tmp) => {
      const archive = await writeOciArchive(await spec(tmp), join(tmp, `${artifact}.tar`));
      // Intermediate files (the pause binary) live on in the archive only.
      for (const f of await readdir(tmp)) if (f !== `${artifact}.tar`) await rm(join(tmp, f), { recursive: true });
      progress(`${artifact}: ${archive.manifestDigest}, ${archive.size} bytes`);
    },
    { root: imagesRoot(cacheDir), progress },
  );
  return join(dir, `${artifact}.tar`);
}

/** `registry.k8s.io/pause:3.10.1` from src/cluster/nodes/pause (a static Go program: reaps children, exits on TERM). */
export async function pauseImage(cacheDir: string, progress: Progress): Promise<NodeImage> {
  const go = goVersion();
  const sources = ['go.mod', 'pause.go'].flatMap((f) => [f, readFileSync(join(PAUSE_SRC, f))]);
  const hash = contentHash(['pause-image-v1', PAUSE_IMAGE, go, ...sources, ociWriterSource(), thisSource()]);
  const archive = await cachedImage(cacheDir, 'pause', hash, progress, async (tmp) => {
    const binary = join(tmp, 'pause');
    await runStep(
      'pause',
      'go',
      ['build', '-trimpath', '-buildvcs=false', '-ldflags=-s -w -buildid=', '-o', binary, '.'],
      { cwd: PAUSE_SRC, env: { ...process.env, CGO_ENABLED: '0', GOFLAGS: '-mod=mod' }, progress },
    );
    return {
      name: PAUSE_IMAGE,
      files: [{ path: '/pause', source: binary, mode: 0o755 }],
      // As upstream's image: the sandbox needs no privileges of its own.
      config: { Entrypoint: ['/pause'], User: '65535:65535' },
    };
  });
  return { name: PAUSE_IMAGE, archive };
}

/** `localhost/sbx/busybox:1`: /bin/busybox with a symlink for every applet it has; `sh` by default. */
export async function busyboxTestImage(cacheDir: string, progress: Progress): Promise<NodeImage> {
  if (!existsSync(BUSYBOX))
    throw new SandboxError('cluster.image', `${BUSYBOX} is missing: the busybox test image is made from it`, {
      hint: 'install the Debian package busybox-static (scripts/bootstrap.sh does this)',
    });
  // Paths relative to / (bin/sh, usr/bin/wget, ...), as this build of busybox would install them.
  const applets = execFileSync(BUSYBOX, ['--list-full'], { encoding: 'utf8' })
    .split('\n')
    .filter((a) => a && a !== 'bin/busybox');
  const hash = contentHash(['busybox-image-v1', readFileSync(BUSYBOX), ...applets, ociWriterSource(), thisSource()]);
  const archive = await cachedImage(cacheDir, 'busybox', hash, progress, () =>
    Promise.resolve({
      name: BUSYBOX_TEST_IMAGE,
      files: [
        { path: '/bin/busybox', source: BUSYBOX, mode: 0o755 },
        // Names for uid/gid 0 and nobody, so `id`, `ls -l` and `whoami` answer as on any image.
        { path: '/etc/passwd', content: 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' },
        { path: '/etc/group', content: 'root:x:0:\nnogroup:x:65534:\n' },
      ],
      symlinks: applets.map((a): ImageSymlink => ({ path: a, target: '/bin/busybox' })),
      dirs: [
        { path: '/tmp', mode: 0o1777 },
        { path: '/root', mode: 0o700 },
      ],
      // Cmd, not Entrypoint (as docker.io/library/busybox): a Pod's `command: [sleep, "60"]` or `args` then run as
      // written instead of as arguments to sh.
      config: { Cmd: ['sh'], Env: ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'] },
    }),
  );
  return { name: BUSYBOX_TEST_IMAGE, archive };
}

/** Every image a real node imports at start, built (or found in the cache) one after the other. */
export async function nodeImageArchives(cacheDir: string, progress: Progress = () => {}): Promise<NodeImage[]> {
  return [await pauseImage(cacheDir, progress), await busyboxTestImage(cacheDir, progress)];
}
