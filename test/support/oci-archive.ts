import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { Readable } from 'node:stream';
import { gunzipSync } from 'node:zlib';
import tar from 'tar-stream';

/**
 * Reads an OCI archive written by src/cluster/oci-image.ts back, independently of the writer: untars it, follows
 * index.json -> manifest -> config/layer, and checks every blob against its sha256 name and every descriptor's
 * digest and size, and the layer's diff_id, so a test sees the image as containerd would.
 */

export interface TarEntry {
  header: tar.Header;
  body: Buffer;
}

export async function readTar(data: Buffer): Promise<Map<string, TarEntry>> {
  const entries = new Map<string, TarEntry>();
  const extract = tar.extract();
  Readable.from([data]).pipe(extract as unknown as NodeJS.WritableStream);
  for await (const entry of extract) {
    const chunks: Buffer[] = [];
    for await (const c of entry) chunks.push(c as Buffer);
    assert.ok(!entries.has(entry.header.name), `${entry.header.name} appears twice in the tar`);
    entries.set(entry.header.name, { header: entry.header, body: Buffer.concat(chunks) });
  }
  return entries;
}

const sha256 = (b: Buffer) => `sha256:${createHash('sha256').update(b).digest('hex')}`;

interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  platform?: { architecture: string; os: string };
  annotations?: Record<string, string>;
}

export interface ParsedImage {
  outer: Map<string, TarEntry>;
  index: { schemaVersion: number; mediaType: string; manifests: Descriptor[] };
  manifestDescriptor: Descriptor;
  manifest: { schemaVersion: number; mediaType: string; config: Descriptor; layers: Descriptor[] };
  config: {
    architecture: string;
    os: string;
    config: Record<string, unknown>;
    rootfs: { type: string; diff_ids: string[] };
  };
  /** The layer's entries, by name. */
  layer: Map<string, TarEntry>;
  /** The layer's entry names in archive order. */
  layerOrder: string[];
}

export async function parseOciArchive(path: string): Promise<ParsedImage> {
  const outer = await readTar(await readFile(path));
  const layout = outer.get('oci-layout');
  assert.ok(layout, 'oci-layout is missing');
  assert.deepEqual(JSON.parse(layout.body.toString()), { imageLayoutVersion: '1.0.0' });
  // Every blob is named by the sha256 of its bytes.
  for (const [name, e] of outer) {
    if (!name.startsWith('blobs/sha256/') || e.header.type !== 'file') continue;
    assert.equal(sha256(e.body), `sha256:${name.slice('blobs/sha256/'.length)}`, `blob ${name} has the wrong name`);
  }
  const blob = (d: Descriptor): Buffer => {
    const e = outer.get(`blobs/sha256/${d.digest.replace(/^sha256:/, '')}`);
    assert.ok(e, `blob ${d.digest} (${d.mediaType}) is missing`);
    assert.equal(e.body.length, d.size, `descriptor size of ${d.digest}`);
    assert.equal(sha256(e.body), d.digest);
    return e.body;
  };
  const indexEntry = outer.get('index.json');
  assert.ok(indexEntry, 'index.json is missing');
  const index = JSON.parse(indexEntry.body.toString()) as ParsedImage['index'];
  assert.equal(index.manifests.length, 1);
  const manifestDescriptor = index.manifests[0]!;
  const manifest = JSON.parse(blob(manifestDescriptor).toString()) as ParsedImage['manifest'];
  const config = JSON.parse(blob(manifest.config).toString()) as ParsedImage['config'];
  assert.equal(manifest.layers.length, 1);
  const compressed = blob(manifest.layers[0]!);
  const layerTar = gunzipSync(compressed);
  assert.deepEqual(config.rootfs, { type: 'layers', diff_ids: [sha256(layerTar)] }, 'diff_id is the uncompressed sha');
  const layer = await readTar(layerTar);
  return { outer, index, manifestDescriptor, manifest, config, layer, layerOrder: [...layer.keys()] };
}
