import { createHash } from 'node:crypto';
import { constants, createReadStream } from 'node:fs';
import { mkdir, open, type FileHandle } from 'node:fs/promises';
import { posix, resolve, sep } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import tar from 'tar-stream';
import { SandboxError } from '../../errors.js';
import { MAX_SMALL_FILE_BYTES, parseMeta, type FileDigest, type RecordMeta } from './record.js';

/**
 * The transfer format of `GET /v1/checkpoints/{id}/blob` (docs/placement.md): an uncompressed tar stream, first
 * `meta.json` (0600), then the directory `export/` (0700) and the export directory's files under `export/`.
 * Written and read with tar-stream (docs/dependencies.md), entry by entry, never buffered whole.
 *
 * Unpacking trusts nothing in the stream: names that are empty, absolute, hold a backslash or a `..` segment, or
 * resolve outside the destination are rejected; so is every entry that is not a regular file or a directory
 * (symlinks, hard links, devices, FIFOs), every file meta.json does not list, and any declared size above the cap
 * (checked on meta.json's sizes and on each header before a byte of the body is read), and a stream of more than
 * MAX_RECORD_ENTRIES entries, directories included (a record has five). Each file is hashed as it is
 * written and checked against meta.json; a stream that ends early is an error. Files are created exclusively
 * (O_EXCL|O_NOFOLLOW) below the destination, so nothing is written anywhere else.
 */

export interface UnpackLimits {
  /** Most bytes the record's files may declare together (a decompression-bomb guard, not a business limit). */
  maxTotalBytes: number;
  /** More checks of meta.json, run before any file is read (the caller's expectations of this record). */
  check?: (meta: RecordMeta) => void;
}

export interface Unpacked {
  meta: RecordMeta;
  /** Bytes of file content received. */
  bytes: number;
}

const EXPORT = 'export';
/**
 * Most entries one record stream may hold, directories included: a record is meta.json, export/ and meta.json's
 * files (at most 16, record.ts); the rest is slack for a writer that repeats a directory header. Without it a hostile
 * peer could stream directory headers (no body, 512 bytes each) for as long as it likes, each one a mkdir.
 */
export const MAX_RECORD_ENTRIES = 64;
/** Blocks of zeros are left as holes: a checkpoint's RAM file is mostly untouched pages, which stay unallocated. */
const BLOCK = 4096;
const ZEROS = Buffer.alloc(BLOCK);

/** A record this node refuses (placement.bad-record); also heal.ts's checks of meta.json and template.json. */
export function rejectRecord(message: string): never {
  throw new SandboxError('placement.bad-record', message, {
    hint: 'the peer serves a record this node will not accept; nothing was published',
  });
}

/** The stream of one record: meta.json, export/, export/<file> for each file in meta.json's order. */
export function packRecord(meta: RecordMeta, dir: string): Readable {
  const pack = tar.pack();
  const mtime = new Date(meta.created_at);
  void (async () => {
    const body = Buffer.from(JSON.stringify(meta));
    await new Promise<void>((ok, fail) =>
      pack.entry({ name: 'meta.json', mode: 0o600, mtime, size: body.length }, body, (err) => (err ? fail(err) : ok())),
    );
    pack.entry({ name: `${EXPORT}/`, type: 'directory', mode: 0o700, mtime });
    for (const f of meta.files) {
      const sink = pack.entry({ name: `${EXPORT}/${f.path}`, type: 'file', mode: 0o600, mtime, size: f.size });
      await pipeline(createReadStream(resolve(dir, f.path), { highWaterMark: 1 << 20 }), sink);
    }
    pack.finalize();
  })().catch((err: unknown) => pack.destroy(err as Error));
  return nodeStream(pack);
}

/** tar-stream's streams are streamx streams; callers get a node stream (pipe, unpipe, readableEnded, destroy). */
export function nodeStream(s: tar.Pack): Readable {
  return Readable.from(s as AsyncIterable<Buffer>, { objectMode: false });
}

/** The entry name, cleaned; rejected unless it is a plain relative path that stays inside `dest`. */
export function entryName(raw: string, dest: string): string {
  if (!raw) rejectRecord('an entry has an empty name');
  if (raw.includes('\\')) rejectRecord(`entry "${raw}": names must not contain a backslash`);
  if (raw.includes('\0')) rejectRecord(`entry "${raw}": names must not contain NUL`);
  if (raw.startsWith('/')) rejectRecord(`entry "${raw}": absolute paths are not accepted`);
  if (raw.split('/').includes('..')) rejectRecord(`entry "${raw}": ".." is not accepted in a name`);
  const clean = posix.normalize(raw).replace(/\/+$/, '');
  if (clean === '.' || clean === '') rejectRecord(`entry "${raw}": names the destination itself`);
  const full = resolve(dest, clean);
  if (!full.startsWith(dest + sep)) rejectRecord(`entry "${raw}": resolves outside the destination`);
  return clean;
}

/**
 * Read a record stream into `dest` (an empty staging directory the caller made and removes on failure): the export
 * directory's files end up in `<dest>/export/`. Resolves with meta.json once every listed file has arrived whole,
 * with its size and checksum; rejects with a SandboxError naming the first problem otherwise.
 */
export async function unpackRecord(src: Readable, dest: string, limits: UnpackLimits): Promise<Unpacked> {
  dest = resolve(dest);
  const extract = tar.extract();
  // The source's failure (a reset connection, an aborted request) ends the parse with that error.
  src.on('error', (err) => extract.destroy(err));
  src.on('close', () => {
    if (!src.readableEnded) extract.destroy(new Error('the connection closed mid-stream'));
  });
  src.pipe(extract as unknown as NodeJS.WritableStream);
  let meta: RecordMeta | undefined;
  const received = new Set<string>();
  let bytes = 0;
  let entries = 0;
  try {
    for await (const source of extract) {
      const h = source.header;
      const entry = source as AsyncIterable<Buffer>;
      if (++entries > MAX_RECORD_ENTRIES)
        rejectRecord(
          `the stream holds more than ${MAX_RECORD_ENTRIES} entries (directories included); a record has meta.json, ${EXPORT}/ and its files`,
        );
      const name = entryName(h.name, dest);
      if (h.size > limits.maxTotalBytes)
        rejectRecord(`entry "${name}" declares ${h.size} bytes, above the cap of ${limits.maxTotalBytes}`);
      if (!meta) {
        if (name !== 'meta.json' || h.type !== 'file')
          rejectRecord(`the first entry is "${name}" (${h.type}), not meta.json`);
        if (h.size > MAX_SMALL_FILE_BYTES)
          rejectRecord(`meta.json declares ${h.size} bytes (at most ${MAX_SMALL_FILE_BYTES})`);
        meta = parseMeta((await readAll(entry)).toString('utf8'));
        const total = meta.files.reduce((n, f) => n + f.size, 0);
        if (total > limits.maxTotalBytes)
          rejectRecord(`meta.json declares ${total} bytes of files, above the cap of ${limits.maxTotalBytes}`);
        limits.check?.(meta);
        continue;
      }
      if (h.type === 'directory') {
        if (name !== EXPORT && !name.startsWith(`${EXPORT}/`))
          rejectRecord(`directory "${name}" is outside ${EXPORT}/`);
        await mkdir(resolve(dest, name), { recursive: true, mode: 0o700 });
        await drain(entry);
        continue;
      }
      if (h.type !== 'file' && h.type !== 'contiguous-file')
        rejectRecord(`entry "${name}" is a ${h.type}; only regular files and directories are accepted`);
      const rel = name.startsWith(`${EXPORT}/`) ? name.slice(EXPORT.length + 1) : undefined;
      const want = rel === undefined ? undefined : meta.files.find((f) => f.path === rel);
      if (!want) rejectRecord(`entry "${name}" is not a file meta.json lists`);
      if (received.has(want.path)) rejectRecord(`entry "${name}" appears twice`);
      if (h.size !== want.size) rejectRecord(`entry "${name}" is ${h.size} bytes; meta.json says ${want.size}`);
      await mkdir(resolve(dest, EXPORT), { recursive: true, mode: 0o700 });
      const got = await writeFile(entry, resolve(dest, name), want);
      if (got !== want.sha256)
        rejectRecord(`entry "${name}": SHA-256 ${got} does not match meta.json's ${want.sha256}`);
      received.add(want.path);
      bytes += want.size;
    }
  } catch (err) {
    extract.destroy();
    src.unpipe(extract as unknown as NodeJS.WritableStream);
    src.destroy();
    if (err instanceof SandboxError) throw err;
    throw new SandboxError('placement.truncated', `the record stream failed: ${(err as Error).message}`, {
      cause: err,
      hint: 'the peer went away or the connection broke mid-transfer; nothing was published (try another owner)',
    });
  }
  if (!meta) rejectRecord('the stream holds no entries (no meta.json)');
  const missing = meta.files.filter((f) => !received.has(f.path)).map((f) => `export/${f.path}`);
  if (missing.length) rejectRecord(`the stream ended without ${missing.join(', ')}`);
  return { meta, bytes };
}

async function readAll(entry: AsyncIterable<Buffer>): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of entry) chunks.push(c);
  return Buffer.concat(chunks);
}

async function drain(entry: AsyncIterable<Buffer>): Promise<void> {
  // A directory has no body; a hostile one's is dropped.
  for await (const chunk of entry) void chunk;
}

/** Write one entry to a new file (holes for zero blocks), hashing as it goes; the SHA-256 of what was written. */
async function writeFile(entry: AsyncIterable<Buffer>, path: string, want: FileDigest): Promise<string> {
  const flags = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;
  const fh = await open(path, flags, 0o600).catch((err: unknown) =>
    rejectRecord(`entry "${path}" cannot be created: ${(err as Error).message}`),
  );
  try {
    const hash = createHash('sha256');
    let pos = 0;
    for await (const chunk of entry) {
      hash.update(chunk);
      await writeNonZero(fh, chunk, pos);
      pos += chunk.length;
    }
    if (pos !== want.size) throw new Error(`export/${want.path} ended after ${pos} of ${want.size} bytes`);
    await fh.truncate(want.size);
    await fh.datasync();
    return hash.digest('hex');
  } finally {
    await fh.close();
  }
}

/** Write the chunk at `pos`, skipping 4 KiB blocks of zeros (they read back as zeros from the hole). */
async function writeNonZero(fh: FileHandle, chunk: Buffer, pos: number): Promise<void> {
  let start = -1;
  for (let off = 0; off < chunk.length; off += BLOCK) {
    const end = Math.min(off + BLOCK, chunk.length);
    const zero = chunk.subarray(off, end).equals(end - off === BLOCK ? ZEROS : ZEROS.subarray(0, end - off));
    if (!zero && start < 0) start = off;
    if (zero && start >= 0) {
      await fh.write(chunk, start, off - start, pos + start);
      start = -1;
    }
  }
  if (start >= 0) await fh.write(chunk, start, chunk.length - start, pos + start);
}
