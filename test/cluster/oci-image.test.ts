import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { chmod, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import {
  ANNOTATION_IMAGE_NAME,
  ANNOTATION_REF_NAME,
  MEDIA_TYPES,
  ociArchitecture,
  ociRefName,
  writeOciArchive,
  type OciImageSpec,
} from '../../src/cluster/oci-image.js';
import { SandboxError } from '../../src/errors.js';
import { parseOciArchive } from '../support/oci-archive.js';

// In-process: packs a small image from files in a temp dir and reads it back with an independent parser
// (test/support/oci-archive.ts), recomputing every sha256. containerd's own import is node-images.test.ts.

let dir: string;
let spec: OciImageSpec;
const toolBytes = Buffer.from('#!/bin/sh\necho hello from the image\n');

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sbx-oci-'));
  await writeFile(join(dir, 'tool'), toolBytes);
  await chmod(join(dir, 'tool'), 0o750);
  spec = {
    name: 'localhost/sbx/test-image:2',
    files: [
      { path: '/usr/local/bin/tool', source: join(dir, 'tool') },
      { path: 'etc/motd', content: 'hi\n', mode: 0o600 },
    ],
    symlinks: [{ path: '/bin/tool', target: '/usr/local/bin/tool' }],
    dirs: [{ path: '/tmp', mode: 0o1777 }],
    config: { Entrypoint: ['/bin/tool'], Cmd: ['--x'], Env: ['PATH=/bin'], User: '1000' },
  };
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('writeOciArchive', () => {
  it('writes an OCI layout whose index, manifest, config and layer agree, digests and sizes recomputed', async () => {
    const out = join(dir, 'image.tar');
    const written = await writeOciArchive(spec, out);
    const img = await parseOciArchive(out);

    assert.equal(img.index.schemaVersion, 2);
    assert.equal(img.index.mediaType, MEDIA_TYPES.index);
    assert.equal(img.manifestDescriptor.mediaType, MEDIA_TYPES.manifest);
    assert.equal(img.manifestDescriptor.digest, written.manifestDigest);
    assert.deepEqual(img.manifestDescriptor.platform, { architecture: ociArchitecture(), os: 'linux' });
    // The names `ctr images import` reads: the full name, and the tag as containerd's own exporter writes it.
    assert.deepEqual(img.manifestDescriptor.annotations, {
      [ANNOTATION_IMAGE_NAME]: 'localhost/sbx/test-image:2',
      [ANNOTATION_REF_NAME]: '2',
    });
    assert.equal(img.manifest.config.mediaType, MEDIA_TYPES.config);
    assert.equal(img.manifest.config.digest, written.configDigest);
    assert.equal(img.manifest.layers[0]?.mediaType, MEDIA_TYPES.layer);
    assert.equal(img.manifest.layers[0]?.digest, written.layerDigest);
    assert.deepEqual(img.config.rootfs.diff_ids, [written.diffId]);
    assert.equal(img.config.os, 'linux');
    assert.deepEqual(img.config.config, spec.config);
    assert.equal(written.size, (await readFile(out)).length);

    // The layer: sorted names, parents added as directories, modes as asked, owned by root, mtime 0.
    assert.deepEqual(img.layerOrder, [
      'bin/',
      'bin/tool',
      'etc/',
      'etc/motd',
      'tmp/',
      'usr/',
      'usr/local/',
      'usr/local/bin/',
      'usr/local/bin/tool',
    ]);
    const entry = (n: string) => {
      const e = img.layer.get(n);
      assert.ok(e, `${n} is missing from the layer`);
      return e;
    };
    for (const e of img.layer.values()) {
      assert.equal(e.header.uid, 0);
      assert.equal(e.header.gid, 0);
      assert.equal(e.header.mtime.getTime(), 0);
    }
    assert.equal(entry('usr/local/bin/tool').header.mode, 0o750, "a source file keeps its source's mode");
    assert.deepEqual(entry('usr/local/bin/tool').body, toolBytes);
    assert.equal(entry('etc/motd').header.mode, 0o600);
    assert.equal(entry('etc/motd').body.toString(), 'hi\n');
    assert.equal(entry('bin/tool').header.type, 'symlink');
    assert.equal(entry('bin/tool').header.linkname, '/usr/local/bin/tool');
    assert.equal(entry('tmp/').header.type, 'directory');
    assert.equal(entry('tmp/').header.mode, 0o1777);
    assert.equal(entry('usr/local/').header.mode, 0o755);
  });

  it('is reproducible: the same inputs give the same bytes, other inputs another digest', async () => {
    const a = await writeOciArchive(spec, join(dir, 'a.tar'));
    const b = await writeOciArchive(spec, join(dir, 'b.tar'));
    const hash = async (p: string) =>
      createHash('sha256')
        .update(await readFile(p))
        .digest('hex');
    assert.equal(await hash(a.path), await hash(b.path));
    assert.equal(a.manifestDigest, b.manifestDigest);
    const c = await writeOciArchive({ ...spec, config: { ...spec.config, Cmd: ['--y'] } }, join(dir, 'c.tar'));
    assert.notEqual(c.manifestDigest, a.manifestDigest);
    assert.equal(c.layerDigest, a.layerDigest, 'a config change leaves the layer alone');
  });

  it('refuses bad image definitions with cluster.image and leaves no file behind', async () => {
    const bad: Array<[string, OciImageSpec]> = [
      ['a path out of the image', { ...spec, files: [{ path: '../etc/passwd', content: 'x' }] }],
      ['a path listed twice', { ...spec, files: [...spec.files, { path: 'etc/motd', content: 'y' }] }],
      [
        'a file below a symlink',
        { ...spec, symlinks: [{ path: '/usr', target: '/x' }], files: [{ path: '/usr/a', content: 'z' }] },
      ],
      ['a missing source', { ...spec, files: [{ path: '/a', source: join(dir, 'nope') }] }],
      ['a directory as a source', { ...spec, files: [{ path: '/a', source: dir }] }],
      ['a name without a tag', { ...spec, name: 'localhost/sbx/test-image' }],
      ['a name without a registry', { ...spec, name: 'busybox:1' }],
    ];
    const outDir = await mkdtemp(join(dir, 'bad-'));
    for (const [what, s] of bad) {
      await assert.rejects(
        writeOciArchive(s, join(outDir, 'x.tar')),
        (err: unknown) => err instanceof SandboxError && err.code === 'cluster.image',
        what,
      );
    }
    assert.deepEqual(await readdir(outDir), []);
  });
});

describe('ociRefName', () => {
  it("is the tag, as containerd's exporter writes it; a by-digest name stays whole", () => {
    assert.equal(ociRefName('registry.k8s.io/pause:3.10.1'), '3.10.1');
    assert.equal(ociRefName('localhost:5000/sbx/busybox:1'), '1');
    const byDigest = `localhost:5000/sbx/busybox@sha256:${'a'.repeat(64)}`;
    assert.equal(ociRefName(byDigest), byDigest);
  });
});
