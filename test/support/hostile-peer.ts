/**
 * Checkpoint record streams, good and hostile, and a "peer" that serves them as sandboxd's
 * `HEAD|GET /v1/checkpoints/{id}/blob` would: for the unpack unit tests and for a real daemon's heal.
 */
import { createHash, randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { PassThrough, type Readable } from 'node:stream';
import tar, { type Header } from 'tar-stream';
import { nodeStream } from '../../src/sandboxd/placement/blob.js';
import { META_FORMAT, type RecordMeta } from '../../src/sandboxd/placement/record.js';

export interface FileSpec {
  path: string;
  body: Buffer;
}

/** A record's three files with made-up content (the RAM file mostly zeros, as a real one is). */
export function sampleFiles(memBytes = 1 << 20): FileSpec[] {
  const mem = Buffer.alloc(memBytes);
  randomBytes(8192).copy(mem, 4096);
  mem.write('the end', memBytes - 16);
  return [
    { path: 'template.json', body: Buffer.from(JSON.stringify({ name: 'x', memoryMiB: 1 })) },
    { path: 'state', body: randomBytes(3000) },
    { path: 'mem', body: mem },
  ];
}

export function metaFor(id: string, files: FileSpec[], over: Partial<RecordMeta> = {}): RecordMeta {
  return {
    format: META_FORMAT,
    id,
    sandbox_id: 'sb_0000000000000001',
    key: { template: 'sandbox/minimal', net: 'none', size: 'small' },
    created_at: new Date(0).toISOString(),
    origin: 'hostile-peer',
    via: [],
    files: files.map((f) => ({
      path: f.path,
      size: f.body.length,
      sha256: createHash('sha256').update(f.body).digest('hex'),
    })),
    ...over,
  };
}

export type Entry = { header: Partial<Header> & { name: string }; body?: Buffer | string };

/** A tar stream of exactly these entries (bodies written whole). */
export function tarOf(entries: Entry[]): Readable {
  const pack = tar.pack();
  for (const e of entries) {
    if (e.body === undefined) pack.entry(e.header);
    else pack.entry(e.header, e.body);
  }
  pack.finalize();
  return nodeStream(pack);
}

/** The well-formed entries of a record, to be altered by a hostile case. */
export function goodEntries(meta: RecordMeta, files: FileSpec[]): Entry[] {
  return [
    { header: { name: 'meta.json', mode: 0o600 }, body: JSON.stringify(meta) },
    { header: { name: 'export/', type: 'directory', mode: 0o700 } },
    ...files.map((f) => ({ header: { name: `export/${f.path}`, mode: 0o600 }, body: f.body })),
  ];
}

/** The stream's first `bytes` bytes, then its end (as a peer that died mid-transfer leaves it). */
export function truncated(src: Readable, bytes: number): Readable {
  const out = new PassThrough();
  let seen = 0;
  src.on('data', (c: Buffer) => {
    if (seen >= bytes) return;
    out.write(c.subarray(0, Math.max(0, bytes - seen)));
    seen += c.length;
    if (seen >= bytes) out.end();
  });
  src.on('end', () => out.end());
  return out;
}

/** The hostile cases the unpacker must refuse: name, the stream, and what the error must say. */
export function hostileCases(
  id: string,
  memBytes = 1 << 20,
): Array<{ name: string; stream: () => Readable; error: RegExp }> {
  const files = sampleFiles(memBytes);
  const meta = metaFor(id, files);
  const good = () => goodEntries(meta, files);
  const replaceLast = (e: Entry) => () => tarOf([...good().slice(0, -1), e]);
  return [
    {
      name: 'absolute path',
      stream: replaceLast({ header: { name: '/tmp/sbx-hostile-absolute' }, body: 'x' }),
      error: /absolute paths are not accepted/,
    },
    {
      name: '../ escape',
      stream: replaceLast({ header: { name: 'export/../../sbx-hostile-escape' }, body: 'x' }),
      error: /"\.\." is not accepted/,
    },
    {
      name: 'backslash',
      stream: replaceLast({ header: { name: 'export\\mem' }, body: 'x' }),
      error: /backslash/,
    },
    {
      name: 'symlink',
      stream: replaceLast({ header: { name: 'export/mem', type: 'symlink', linkname: '/etc/passwd' } }),
      error: /is a symlink; only regular files and directories/,
    },
    {
      name: 'hard link',
      stream: replaceLast({ header: { name: 'export/mem', type: 'link', linkname: 'export/state' } }),
      error: /is a link; only regular files and directories/,
    },
    {
      name: 'device node',
      stream: replaceLast({
        header: { name: 'export/mem', type: 'character-device', devmajor: 1, devminor: 3 },
      }),
      error: /is a character-device; only regular files and directories/,
    },
    {
      name: 'declared size above the cap (meta.json)',
      stream: () =>
        tarOf(
          goodEntries(
            metaFor(id, files, {
              files: meta.files.map((f) => (f.path === 'mem' ? { ...f, size: 2 ** 41 } : f)),
            }),
            files,
          ),
        ),
      error: /declares \d+ bytes of files, above the cap/,
    },
    {
      name: 'declared size above the cap (entry header)',
      stream: () => {
        const pack = tar.pack();
        const [m, d] = good();
        pack.entry(m!.header, m!.body!);
        pack.entry(d!.header);
        // The header alone: the body would be 1 TiB; the puller must stop at the header.
        pack.entry({ name: 'export/mem', size: 2 ** 40 }).write(Buffer.alloc(512));
        return nodeStream(pack);
      },
      error: /declares 1099511627776 bytes, above the cap/,
    },
    {
      name: 'checksum mismatch',
      stream: replaceLast({ header: { name: 'export/mem' }, body: Buffer.alloc(files[2]!.body.length, 7) }),
      error: /SHA-256 [0-9a-f]+ does not match/,
    },
    {
      name: 'truncated stream',
      stream: () => truncated(tarOf(good()), 512 * 12),
      error: /ended after|stream failed|Unexpected end/,
    },
    {
      name: 'a file meta.json does not list',
      stream: () => tarOf([...good(), { header: { name: 'export/extra' }, body: 'x' }]),
      error: /not a file meta\.json lists/,
    },
    {
      name: 'no meta.json first',
      stream: () => tarOf(good().slice(1)),
      error: /not meta\.json/,
    },
    {
      name: 'meta.json for another shape',
      stream: () => tarOf([{ header: { name: 'meta.json' }, body: '{"format":"zip"}' }]),
      error: /meta\.json: /,
    },
  ];
}

/** An HTTP server answering HEAD (200: "I own it") and GET with `streams[id]()`; 404 for anything else. */
export async function startHostilePeer(
  streams: Map<string, () => Readable>,
): Promise<{ address: string; requests: string[]; close(): Promise<void> }> {
  const requests: string[] = [];
  const server: Server = createServer((req, res) => {
    requests.push(`${req.method} ${req.url}`);
    const m = /^\/v1\/checkpoints\/([^/]+)\/blob$/.exec(req.url ?? '');
    const make = m ? streams.get(m[1]!) : undefined;
    if (!make) {
      res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":"not found"}');
      return;
    }
    res.writeHead(200, { 'content-type': 'application/x-tar' });
    if (req.method === 'HEAD') return res.end();
    const s = make();
    s.on('error', () => res.destroy());
    s.pipe(res);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    address: `127.0.0.1:${port}`,
    requests,
    close: () =>
      new Promise((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}
