/**
 * The checkpoint transfer format on its own (no daemon, no VMs): a record packed by one side unpacks whole on the
 * other, holes and all; every hostile stream is refused with a clear error and writes nothing outside its
 * staging directory.
 */
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { SandboxError } from '../../src/errors.js';
import { entryName, MAX_RECORD_ENTRIES, packRecord, unpackRecord } from '../../src/sandboxd/placement/blob.js';
import { digestRecord, META_FORMAT, parseMeta } from '../../src/sandboxd/placement/record.js';
import { goodEntries, hostileCases, metaFor, sampleFiles, tarOf, truncated } from '../support/hostile-peer.js';

const ID = 'ck_00112233445566aa';
const CAP = 64 << 20;

describe('checkpoint record streams', () => {
  let root: string;
  before(async () => {
    root = await mkdtemp(join(tmpdir(), 'sbx-blob-'));
  });
  after(async () => rm(root, { recursive: true, force: true }));

  async function sourceRecord(memBytes = 8 << 20) {
    const dir = join(root, `src-${Math.random().toString(16).slice(2)}`);
    await mkdir(dir);
    for (const f of sampleFiles(memBytes)) await writeFile(join(dir, f.path), f.body);
    const files = await digestRecord(dir);
    const meta = parseMeta(
      JSON.stringify({
        format: META_FORMAT,
        id: ID,
        sandbox_id: 'sb_1',
        key: { template: 'sandbox/minimal', net: 'none', size: 'small' },
        created_at: new Date().toISOString(),
        origin: 'node-a',
        via: [],
        files,
      }),
    );
    return { dir, meta };
  }

  it('a packed record unpacks whole: same bytes, checksums verified, zero blocks left as holes', async () => {
    const { dir, meta } = await sourceRecord();
    const dest = await mkdtemp(join(root, 'stage-'));
    const out = await unpackRecord(packRecord(meta, dir), dest, { maxTotalBytes: CAP });
    assert.deepEqual(out.meta, meta);
    assert.equal(
      out.bytes,
      meta.files.reduce((n, f) => n + f.size, 0),
    );
    assert.deepEqual((await readdir(dest)).sort(), ['export']);
    for (const f of meta.files)
      assert.ok((await readFile(join(dest, 'export', f.path))).equals(await readFile(join(dir, f.path))), f.path);
    const mem = await stat(join(dest, 'export', 'mem'));
    assert.equal(mem.size, 8 << 20);
    assert.ok(mem.blocks * 512 < 1 << 20, `the 8 MiB RAM file of mostly zeros takes ${mem.blocks * 512} bytes on disk`);
  });

  it('entry names: only plain relative paths that stay inside the destination', () => {
    const dest = '/srv/stage';
    assert.equal(entryName('export/mem', dest), 'export/mem');
    assert.equal(entryName('export/', dest), 'export');
    assert.equal(entryName('./export//mem', dest), 'export/mem');
    for (const [bad, why] of [
      ['', /empty name/],
      ['/etc/passwd', /absolute/],
      ['..', /"\.\."/],
      ['../x', /"\.\."/],
      ['export/../../x', /"\.\."/],
      ['export\\..\\x', /backslash/],
      ['.', /destination itself/],
      ['a\0b', /NUL/],
    ] as const)
      assert.throws(() => entryName(bad, dest), why, JSON.stringify(bad));
  });

  for (const c of hostileCases(ID)) {
    it(`refuses a hostile stream: ${c.name}`, async () => {
      const outer = await mkdtemp(join(root, 'outer-'));
      const dest = join(outer, 'stage');
      await mkdir(dest);
      await assert.rejects(unpackRecord(c.stream(), dest, { maxTotalBytes: CAP }), (err: unknown) => {
        assert.ok(err instanceof SandboxError, String(err));
        assert.match(err.message, c.error);
        return true;
      });
      assert.deepEqual(await readdir(outer), ['stage'], 'nothing was written beside the staging directory');
      await assert.rejects(stat('/tmp/sbx-hostile-absolute'), /ENOENT/);
      await assert.rejects(stat(join(root, 'sbx-hostile-escape')), /ENOENT/);
    });
  }

  it('refuses a stream of more entries than a record has (directory headers included), before making them', async () => {
    const files = sampleFiles();
    const [meta, exportDir, ...rest] = goodEntries(metaFor(ID, files), files);
    // Otherwise a well-formed record: only thousands of empty directories under export/ before its files.
    const dirs = Array.from({ length: 5000 }, (_, i) => ({
      header: { name: `export/d${i}/`, type: 'directory' as const },
    }));
    const dest = await mkdtemp(join(root, 'dirs-'));
    await assert.rejects(
      unpackRecord(tarOf([meta!, exportDir!, ...dirs, ...rest]), dest, { maxTotalBytes: CAP }),
      (err: unknown) => {
        assert.ok(err instanceof SandboxError, String(err));
        assert.equal(err.code, 'placement.bad-record');
        assert.match(err.message, new RegExp(`more than ${MAX_RECORD_ENTRIES} entries \\(directories included\\)`));
        return true;
      },
    );
    const made = await readdir(join(dest, 'export'));
    assert.ok(made.length < MAX_RECORD_ENTRIES, `${made.length} directories were made`);
  });

  it('a stream cut anywhere is refused', async () => {
    const { dir, meta } = await sourceRecord(1 << 20);
    const total = meta.files.reduce((n, f) => n + 512 + Math.ceil(f.size / 512) * 512, 1024);
    for (const cut of [100, 512, 1500, total / 2, total - 2048]) {
      const dest = await mkdtemp(join(root, 'cut-'));
      await assert.rejects(
        unpackRecord(truncated(packRecord(meta, dir), Math.floor(cut)), dest, { maxTotalBytes: CAP }),
        SandboxError,
        `cut at ${cut}`,
      );
    }
  });
});
