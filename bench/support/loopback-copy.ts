/**
 * A plain loopback copy, the floor a checkpoint pull is measured against (bench/placement, bench/resume): the files
 * over HTTP from this process to another node process that writes them to disk and syncs them, as a heal does.
 */
import { spawn } from 'node:child_process';
import { createReadStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** Copies `files` (in `dir`, one after another in one response) and answers the bytes and ms the receiver saw. */
export async function loopbackCopy(dir: string, files: readonly string[]): Promise<{ bytes: number; ms: number }> {
  const server = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/octet-stream' });
    const next = (i: number) => {
      if (i === files.length) return res.end();
      const s = createReadStream(join(dir, files[i]!), { highWaterMark: 1 << 20 });
      s.pipe(res, { end: false });
      s.on('end', () => next(i + 1));
    };
    next(0);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  const out = await mkdtemp(join(tmpdir(), 'sbx-loopback-'));
  const client = `
    const http = require('node:http'); const fs = require('node:fs');
    const t0 = performance.now(); let bytes = 0;
    http.get('http://127.0.0.1:${port}/', (res) => {
      const f = fs.createWriteStream(${JSON.stringify(join(out, 'copy'))});
      res.on('data', (c) => (bytes += c.length));
      res.pipe(f);
      f.on('close', () => { const fd = fs.openSync(${JSON.stringify(join(out, 'copy'))}, 'r+'); fs.fdatasyncSync(fd);
        fs.closeSync(fd); process.stdout.write(JSON.stringify({ bytes, ms: performance.now() - t0 })); });
    });`;
  try {
    const child = spawn(process.execPath, ['-e', client], { stdio: ['ignore', 'pipe', 'inherit'] });
    let text = '';
    child.stdout.on('data', (c: Buffer) => (text += c.toString()));
    await new Promise((r) => child.on('exit', r));
    return JSON.parse(text) as { bytes: number; ms: number };
  } finally {
    server.close();
    await rm(out, { recursive: true, force: true });
  }
}

/** MiB per second. */
export const mbps = (bytes: number, ms: number) => +(bytes / 2 ** 20 / (ms / 1000)).toFixed(0);
