import { createHash, type Hash } from 'node:crypto';
import { createReadStream, createWriteStream, readFileSync } from 'node:fs';
import { rename, rm, stat } from 'node:fs/promises';
import { posix } from 'node:path';
import { Transform, type TransformCallback } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGzip } from 'node:zlib';
import tar from 'tar-stream';
import { SandboxError } from '../errors.js';

/**
 * Writes a single-layer OCI image archive (an OCI image layout in a tar: `oci-layout`, `index.json`,
 * `blobs/sha256/…`) from a list of files on this machine, so real nodes get their images with
 * `ctr images import` and no registry (docs: the OCI image-layout and image-spec).
 *
 * The archive is reproducible: entries sorted by name, mtime 0, uid/gid 0, fixed image `created` time, and gzip
 * without a timestamp; the same inputs give the same manifest digest, so a cache keyed by the inputs stays honest.
 * Parent directories are added (0755) unless listed; containerd needs no other entries (runc creates mount points).
 */

export type ImageFile =
  /** A file copied from this machine (symlinks followed); mode defaults to the source's permission bits. */
  | { path: string; source: string; mode?: number }
  /** A small file written from memory (e.g. /etc/passwd). */
  | { path: string; content: string | Uint8Array; mode?: number };

export interface ImageSymlink {
  path: string;
  target: string;
}

export interface ImageDir {
  path: string;
  mode: number;
}

/** The OCI image config's `config` (what a container runs); the names follow the image-spec. */
export interface ImageRunConfig {
  Entrypoint?: string[];
  Cmd?: string[];
  Env?: string[];
  WorkingDir?: string;
  User?: string;
}

export interface OciImageSpec {
  /** A full reference with a tag, e.g. `registry.k8s.io/pause:3.10.1`: the name containerd imports it under. */
  name: string;
  files: readonly ImageFile[];
  symlinks?: readonly ImageSymlink[];
  dirs?: readonly ImageDir[];
  config: ImageRunConfig;
}

export interface OciArchive {
  path: string;
  /** `sha256:…` of the manifest: the image's identity in containerd (`ctr images ls` DIGEST). */
  manifestDigest: string;
  configDigest: string;
  /** `sha256:…` of the compressed layer blob. */
  layerDigest: string;
  /** `sha256:…` of the uncompressed layer tar (the config's rootfs.diff_ids). */
  diffId: string;
  /** Bytes of the archive. */
  size: number;
}

export const MEDIA_TYPES = {
  index: 'application/vnd.oci.image.index.v1+json',
  manifest: 'application/vnd.oci.image.manifest.v1+json',
  config: 'application/vnd.oci.image.config.v1+json',
  layer: 'application/vnd.oci.image.layer.v1.tar+gzip',
} as const;
/** containerd's annotation with the full image name (core/images/annotations.go), read by `ctr images import`. */
export const ANNOTATION_IMAGE_NAME = 'io.containerd.image.name';
export const ANNOTATION_REF_NAME = 'org.opencontainers.image.ref.name';

const EPOCH = new Date(0);
/** The image config's `created`: fixed, so the config digest depends on the inputs only. */
const CREATED = EPOCH.toISOString().replace('.000Z', 'Z');

/** Go's GOARCH for node's process.arch: the image must match the node's platform or `ctr import` skips it. */
export function ociArchitecture(arch: string = process.arch): string {
  const map: Record<string, string> = { x64: 'amd64', arm64: 'arm64', arm: 'arm', ppc64: 'ppc64le', s390x: 's390x' };
  const a = map[arch];
  if (!a) throw new SandboxError('cluster.image', `no OCI architecture for node's arch ${arch}`);
  return a;
}

/**
 * The OCI ref name containerd's own exporter writes (core/images/archive/reference.go ociReferenceName): the tag of
 * a tagged reference; the full name otherwise.
 */
export function ociRefName(name: string): string {
  const lastSlash = name.lastIndexOf('/');
  const colon = name.indexOf(':', lastSlash + 1);
  if (name.includes('@') || colon < 0) return name;
  return name.slice(colon + 1);
}

function imageProblem(message: string): never {
  throw new SandboxError('cluster.image', message, { hint: 'fix the image definition (src/cluster/node-images.ts)' });
}

/** An image path as a clean relative tar name; absolute input is taken relative to the image root. */
function entryName(path: string): string {
  const clean = posix.normalize(path.replace(/^\/+/, ''));
  if (clean === '.' || clean === '' || clean.startsWith('../') || clean === '..' || clean.includes('\\'))
    imageProblem(`image path ${JSON.stringify(path)} is not a plain path inside the image`);
  return clean.replace(/\/+$/, '');
}

type LayerEntry =
  | { name: string; kind: 'dir'; mode: number }
  | { name: string; kind: 'symlink'; target: string }
  | { name: string; kind: 'file'; mode: number; source: string; size: number }
  | { name: string; kind: 'content'; mode: number; content: Buffer };

async function layerEntries(spec: OciImageSpec): Promise<LayerEntry[]> {
  const entries = new Map<string, LayerEntry>();
  const add = (e: LayerEntry) => {
    if (entries.has(e.name)) imageProblem(`image path /${e.name} is listed twice`);
    entries.set(e.name, e);
  };
  for (const d of spec.dirs ?? []) add({ name: entryName(d.path), kind: 'dir', mode: d.mode & 0o7777 });
  for (const l of spec.symlinks ?? []) {
    if (!l.target) imageProblem(`symlink /${l.path} has an empty target`);
    add({ name: entryName(l.path), kind: 'symlink', target: l.target });
  }
  for (const f of spec.files) {
    const name = entryName(f.path);
    if ('source' in f) {
      const st = await stat(f.source).catch((err: unknown) =>
        imageProblem(`cannot read ${f.source} for /${name}: ${(err as Error).message}`),
      );
      if (!st.isFile()) imageProblem(`${f.source} (for /${name}) is not a regular file`);
      add({ name, kind: 'file', mode: (f.mode ?? st.mode) & 0o7777, source: f.source, size: st.size });
    } else add({ name, kind: 'content', mode: (f.mode ?? 0o644) & 0o7777, content: Buffer.from(f.content) });
  }
  // Every parent must be a directory: add the missing ones, refuse a file or symlink used as one.
  for (const name of [...entries.keys()]) {
    for (let dir = posix.dirname(name); dir !== '.'; dir = posix.dirname(dir)) {
      const parent = entries.get(dir);
      if (!parent) entries.set(dir, { name: dir, kind: 'dir', mode: 0o755 });
      else if (parent.kind !== 'dir') imageProblem(`/${dir} is a ${parent.kind} but /${name} is inside it`);
    }
  }
  return [...entries.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

/** Passes bytes through while hashing them and counting them. */
class Digester extends Transform {
  readonly hash: Hash = createHash('sha256');
  size = 0;
  override _transform(chunk: Buffer, _enc: BufferEncoding, done: TransformCallback): void {
    this.hash.update(chunk);
    this.size += chunk.length;
    done(null, chunk);
  }
  digest(): string {
    return `sha256:${this.hash.digest('hex')}`;
  }
}

function addEntry(pack: tar.Pack, header: Parameters<tar.Pack['entry']>[0], body?: Buffer): Promise<void> {
  return new Promise((resolve, reject) => {
    const done = (err?: Error | null) => (err ? reject(err) : resolve());
    if (body) pack.entry(header, body, done);
    else pack.entry(header, done);
  });
}

/** The layer tar, gzipped, into `file`; returns its digests. Streamed: a large file is never held in memory. */
async function writeLayer(entries: readonly LayerEntry[], file: string) {
  const pack = tar.pack();
  const common = { mtime: EPOCH, uid: 0, gid: 0, uname: '', gname: '' };
  const fill = (async () => {
    for (const e of entries) {
      if (e.kind === 'dir') await addEntry(pack, { ...common, name: `${e.name}/`, type: 'directory', mode: e.mode });
      else if (e.kind === 'symlink')
        await addEntry(pack, { ...common, name: e.name, type: 'symlink', linkname: e.target, mode: 0o777 });
      else if (e.kind === 'content')
        await addEntry(
          pack,
          { ...common, name: e.name, type: 'file', mode: e.mode, size: e.content.length },
          e.content,
        );
      else {
        const sink = pack.entry({ ...common, name: e.name, type: 'file', mode: e.mode, size: e.size });
        // tar-stream fails the entry if the file's length changed since it was stat'd.
        await pipeline(createReadStream(e.source), sink);
      }
    }
    pack.finalize();
  })();
  fill.catch((err: unknown) => pack.destroy(err as Error));
  const uncompressed = new Digester();
  const compressed = new Digester();
  await Promise.all([
    fill,
    pipeline(pack, uncompressed, createGzip({ level: 9 }), compressed, createWriteStream(file)),
  ]);
  return { diffId: uncompressed.digest(), digest: compressed.digest(), size: compressed.size };
}

function jsonBlob(value: unknown): { body: Buffer; digest: string; size: number } {
  const body = Buffer.from(JSON.stringify(value));
  return { body, digest: `sha256:${createHash('sha256').update(body).digest('hex')}`, size: body.length };
}

const blobName = (digest: string) => `blobs/sha256/${digest.slice('sha256:'.length)}`;

/**
 * Writes `spec` as an OCI archive at `out` (through a temp file renamed into place, so a reader never sees half an
 * archive). Importable with `ctr -n k8s.io images import <out>`, which names it `spec.name`.
 */
export async function writeOciArchive(spec: OciImageSpec, out: string): Promise<OciArchive> {
  if (!/^[a-z0-9][\w.-]*(:\d+)?(\/[\w.-]+)+:[\w][\w.-]{0,127}$/.test(spec.name))
    imageProblem(`image name ${JSON.stringify(spec.name)} is not a full reference with a tag (host/path:tag)`);
  const entries = await layerEntries(spec);
  const layerFile = `${out}.layer-${process.pid}`;
  const tmp = `${out}.tmp-${process.pid}`;
  try {
    const layer = await writeLayer(entries, layerFile);
    const architecture = ociArchitecture();
    const config = jsonBlob({
      created: CREATED,
      architecture,
      os: 'linux',
      config: spec.config,
      rootfs: { type: 'layers', diff_ids: [layer.diffId] },
      history: [{ created: CREATED, created_by: 'sandbox-operator src/cluster/oci-image.ts' }],
    });
    const manifest = jsonBlob({
      schemaVersion: 2,
      mediaType: MEDIA_TYPES.manifest,
      config: { mediaType: MEDIA_TYPES.config, digest: config.digest, size: config.size },
      layers: [{ mediaType: MEDIA_TYPES.layer, digest: layer.digest, size: layer.size }],
    });
    const index = Buffer.from(
      JSON.stringify({
        schemaVersion: 2,
        mediaType: MEDIA_TYPES.index,
        manifests: [
          {
            mediaType: MEDIA_TYPES.manifest,
            digest: manifest.digest,
            size: manifest.size,
            platform: { architecture, os: 'linux' },
            annotations: { [ANNOTATION_IMAGE_NAME]: spec.name, [ANNOTATION_REF_NAME]: ociRefName(spec.name) },
          },
        ],
      }),
    );
    const pack = tar.pack();
    const common = { mtime: EPOCH, uid: 0, gid: 0, mode: 0o644 };
    const fill = (async () => {
      await addEntry(pack, { ...common, name: 'oci-layout' }, Buffer.from('{"imageLayoutVersion":"1.0.0"}'));
      await addEntry(pack, { ...common, name: 'index.json' }, index);
      for (const dir of ['blobs/', 'blobs/sha256/'])
        await addEntry(pack, { ...common, name: dir, type: 'directory', mode: 0o755 });
      await addEntry(pack, { ...common, name: blobName(config.digest) }, config.body);
      await addEntry(pack, { ...common, name: blobName(manifest.digest) }, manifest.body);
      await pipeline(
        createReadStream(layerFile),
        pack.entry({ ...common, name: blobName(layer.digest), size: layer.size }),
      );
      pack.finalize();
    })();
    fill.catch((err: unknown) => pack.destroy(err as Error));
    await Promise.all([fill, pipeline(pack, createWriteStream(tmp))]);
    await rename(tmp, out);
    return {
      path: out,
      manifestDigest: manifest.digest,
      configDigest: config.digest,
      layerDigest: layer.digest,
      diffId: layer.diffId,
      size: (await stat(out)).size,
    };
  } finally {
    await rm(layerFile, { force: true });
    await rm(tmp, { force: true });
  }
}

/** This file's text: image caches hash it, so a change to how archives are written rebuilds them. */
export function ociWriterSource(): Buffer {
  return readFileSync(new URL(import.meta.url));
}
