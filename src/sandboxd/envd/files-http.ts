/**
 * envd's plain-HTTP file transfer: `GET /files?path=` streams a file out of the guest (gzip when asked), `POST
 * /files` streams one or more in (multipart parts named `file` whose filename is the target path, or one
 * octet-stream body, optionally gzip-encoded). Nothing is held in memory: bytes move chunk by chunk within the
 * agent stream's credit, and an upload over the node's cap is refused with 413 and its partial file removed.
 * Authorised by the access token or a v1 signature for the operation.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { once } from 'node:events';
import { Readable } from 'node:stream';
import { createGunzip, createGzip, deflateRawSync } from 'node:zlib';
import busboy from 'busboy';
import type { AgentClient } from '../../guest/index.js';
import { hasAccessToken, signatureProblem } from '../../api/envd-access.js';
import { HttpFailure, httpFailure, sendJsonError } from './errors.js';
import { metadataFromHeaders } from './metadata.js';
import type { SandboxContext } from './sandbox-context.js';
import { resolvePath, resolveUser, type GuestUser } from './users.js';

export interface FilesOptions {
  /** Largest upload, per file, decompressed. */
  maxUploadBytes: number;
}

/** Who may do `op`: the sandbox's access token, or a signed URL (which covers its `path` alone). */
function authorize(req: IncomingMessage, url: URL, sbx: SandboxContext, op: 'read' | 'write'): 'token' | 'signed' {
  if (hasAccessToken(req.headers, sbx.envdToken)) return 'token';
  if (url.searchParams.has('signature')) {
    const problem = signatureProblem(url.searchParams, op, sbx.envdToken);
    if (problem) throw new HttpFailure(401, problem);
    return 'signed';
  }
  throw new HttpFailure(401, 'invalid or missing access token (X-Access-Token)');
}

async function who(agent: AgentClient, url: URL): Promise<GuestUser> {
  return resolveUser(agent, url.searchParams.get('username') || undefined);
}

export async function serveFiles(
  req: IncomingMessage,
  res: ServerResponse,
  url: URL,
  sbx: SandboxContext,
  opts: FilesOptions,
): Promise<void> {
  try {
    if (req.method === 'GET') await download(req, res, url, sbx);
    else if (req.method === 'POST') await upload(req, res, url, sbx, opts);
    else throw new HttpFailure(405, `method ${req.method} not allowed on /files`);
  } catch (err) {
    const f = httpFailure(err);
    // The rest of an unread upload is not worth reading: answer, then close the connection.
    if (!req.complete) res.setHeader('connection', 'close');
    sendJsonError(res, f.status, f.message);
  }
}

async function download(req: IncomingMessage, res: ServerResponse, url: URL, sbx: SandboxContext): Promise<void> {
  authorize(req, url, sbx, 'read');
  const agent = sbx.agent();
  const user = await who(agent, url);
  const path = resolvePath(url.searchParams.get('path') ?? '', user);
  const st = await agent.files.stat(path);
  if (st.type === 'dir') throw new HttpFailure(400, `${path} is a directory`);
  const acceptsGzip = /\bgzip\b/.test(String(req.headers['accept-encoding'] ?? ''));
  const abort = new AbortController();
  res.once('close', () => abort.abort());
  // The encoding is chosen on the first chunk: gzip only when the client takes it and the data shrinks.
  let sink: NodeJS.WritableStream | undefined;
  const start = (first: Buffer | undefined, sized = true) => {
    const gzip = acceptsGzip && first !== undefined && compresses(first);
    res.writeHead(200, {
      'content-type': 'application/octet-stream',
      ...(gzip ? { 'content-encoding': 'gzip' } : sized ? { 'content-length': st.size } : {}),
    });
    if (!gzip) return res;
    const z = createGzip();
    z.pipe(res);
    return z;
  };
  // A size of 0 is not a length for procfs and sysfs files (and devices), which have content all the same: such a
  // file is read to its end and sent chunked, as envd sends it.
  if (st.size === 0) {
    await agent.files.readStream(
      path,
      (chunk) => {
        sink ??= start(chunk, false);
        return sink.write(chunk) ? undefined : once(sink, 'drain');
      },
      { timeoutMs: 0, signal: abort.signal },
    );
    (sink ?? start(undefined, false)).end();
    return;
  }
  // The guest said how large the file is (content-length); it must send exactly that. More would run into the next
  // response on this connection, less would leave the client waiting: either way the answer is cut off.
  let sent = 0;
  await agent.files.readStream(
    path,
    (chunk) => {
      if (sent + chunk.length > st.size)
        throw new HttpFailure(502, `the guest sent more of ${path} than its size of ${st.size} bytes`);
      sent += chunk.length;
      sink ??= start(chunk);
      return sink.write(chunk) ? undefined : once(sink, 'drain');
    },
    { length: st.size, timeoutMs: 0, signal: abort.signal },
  );
  if (sent !== st.size) {
    // The file shrank while it was read (or the guest lies); the client must not take a short body as the file.
    if (sink) res.destroy();
    else throw new HttpFailure(502, `${path} changed while it was read; retry`);
    return;
  }
  (sink ?? start(undefined)).end();
}

/**
 * Whether gzip is worth its CPU for data that starts like `chunk`. Every client of undici's fetch (the e2b SDK's)
 * sends `Accept-Encoding: gzip, deflate` whether or not its caller asked for gzip, and deflate runs at ~30 MiB/s on
 * the node's event loop here: for data that does not shrink (binaries, archives, random) that is a third of a read's
 * throughput spent on nothing (PERFORMANCE.md, e2b API). A sample of the start, deflated at the fastest level, decides.
 */
function compresses(chunk: Buffer): boolean {
  const sample = chunk.subarray(0, 64 << 10);
  return deflateRawSync(sample, { level: 1 }).length < sample.length * 0.9;
}

async function upload(
  req: IncomingMessage,
  res: ServerResponse,
  url: URL,
  sbx: SandboxContext,
  opts: FilesOptions,
): Promise<void> {
  const by = authorize(req, url, sbx, 'write');
  // Every upload sets the file's whole metadata, none included: an overwrite does not keep the last upload's pairs.
  let metadata: Record<string, string>;
  try {
    metadata = metadataFromHeaders(req.headersDistinct);
  } catch (err) {
    // Refused before the body is read: undici is still sending it, and a connection closed under it reports EPIPE
    // ("fetch failed") instead of this answer. A small body is read and dropped first, so the SDK gets the 400.
    await discardBody(req, 1 << 20, 2000);
    throw err;
  }
  const agent = sbx.agent();
  const user = await who(agent, url);
  const queryPath = url.searchParams.get('path');
  const type = String(req.headers['content-type'] ?? '');
  const written: Array<{ name: string; type: 'file'; path: string; metadata?: Record<string, string> }> = [];
  const write = async (target: string, source: Readable) => {
    const path = resolvePath(target, user);
    let size = 0;
    const capped = async function* () {
      for await (const chunk of source as AsyncIterable<Buffer>) {
        size += chunk.length;
        if (size > opts.maxUploadBytes)
          throw new HttpFailure(413, `upload of ${path} is over this node's cap of ${opts.maxUploadBytes} bytes`);
        yield chunk;
      }
    };
    let kept: Record<string, string> | undefined;
    try {
      ({ metadata: kept } = await agent.files.upload(path, capped(), {
        parents: true,
        uid: user.uid,
        gid: user.gid,
        timeoutMs: 0,
        metadata,
      }));
    } catch (err) {
      await agent.files.remove(path).catch(() => undefined);
      throw err;
    }
    // What the file holds once written, as envd reads it back (none where the filesystem keeps no attributes).
    const entry = { name: path.slice(path.lastIndexOf('/') + 1), type: 'file' as const, path };
    written.push(kept && Object.keys(kept).length ? { ...entry, metadata: kept } : entry);
  };
  if (type.startsWith('multipart/form-data')) {
    // A signed URL covers its path alone: a second part would go to a filename nobody signed.
    await multipart(req, queryPath, write, by === 'signed');
  } else {
    if (!queryPath) throw new HttpFailure(400, 'path: required for an octet-stream upload');
    const encoding = String(req.headers['content-encoding'] ?? 'identity').toLowerCase();
    if (encoding !== 'identity' && encoding !== 'gzip')
      throw new HttpFailure(415, `content-encoding ${encoding} is not supported (gzip or identity)`);
    const body = encoding === 'gzip' ? req.pipe(createGunzip()) : req;
    await write(queryPath, body);
  }
  if (written.length === 0) throw new HttpFailure(400, 'no file in the upload (multipart parts must be named "file")');
  const payload = JSON.stringify(written);
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) });
  res.end(payload);
}

/** Read and drop the rest of `req`, up to `maxBytes` and `ms`: whether it all came (req.complete). */
function discardBody(req: IncomingMessage, maxBytes: number, ms: number): Promise<boolean> {
  if (req.complete || req.destroyed) return Promise.resolve(req.complete);
  return new Promise((resolve) => {
    let n = 0;
    const done = () => {
      clearTimeout(timer);
      req.off('data', onData).off('end', done).off('close', done);
      req.pause();
      resolve(req.complete);
    };
    const onData = (chunk: Buffer) => {
      n += chunk.length;
      if (n > maxBytes) done();
    };
    const timer = setTimeout(done, ms);
    req.on('data', onData).once('end', done).once('close', done);
    req.resume();
  });
}

/**
 * Each `file` part in order: to the query's path when there is exactly one file, else to the part's filename, which
 * the e2b SDK sets to the full target path (a multi-file write has no `path` query). `onlyQueryPath`: a signed
 * upload, whose one part goes to the signed path; any other part is refused.
 */
function multipart(
  req: IncomingMessage,
  queryPath: string | null,
  write: (target: string, source: Readable) => Promise<void>,
  onlyQueryPath = false,
): Promise<void> {
  return new Promise((resolve, reject) => {
    let bb: busboy.Busboy;
    try {
      // preservePath: the filename is the target path; busboy would otherwise keep only its last component.
      bb = busboy({
        headers: req.headers,
        preservePath: true,
        limits: { files: 1000, fields: 100, fieldSize: 64 << 10 },
      });
    } catch (err) {
      reject(new HttpFailure(400, `invalid multipart body: ${(err as Error).message}`));
      return;
    }
    let chain = Promise.resolve();
    let failed: unknown;
    let parts = 0;
    /** The part being written, so a failure or a client gone can end it (its writer then cancels the guest's write). */
    let current: Readable | undefined;
    let settled = false;
    const resolveOrReject = () => {
      if (settled) return;
      settled = true;
      void chain.then(
        () => (failed ? reject(failed) : resolve()),
        () => reject(failed),
      );
    };
    // Stop parsing and answer. Once a part's writer has failed (over the cap), busboy waits for that part's stream
    // to be read, which no one does any more, and never closes: the upload was never answered. So the parser is
    // detached and the answer given from here.
    const stop = (err: unknown) => {
      failed ??= err;
      req.unpipe(bb);
      current?.destroy(err instanceof Error ? err : new Error(String(err)));
      resolveOrReject();
    };
    bb.on('file', (field, stream, info) => {
      parts++;
      if (field !== 'file' || failed) {
        stream.resume();
        return;
      }
      const target = queryPath && parts === 1 ? queryPath : info.filename;
      chain = chain.then(async () => {
        if (failed) return void stream.resume();
        if (onlyQueryPath && (parts > 1 || !queryPath))
          throw new HttpFailure(400, 'a signed upload writes the one path it was signed for; send one file part');
        if (!target) throw new HttpFailure(400, 'a file part has no filename and the request no path');
        current = stream;
        try {
          await write(target, stream);
        } finally {
          current = undefined;
        }
      });
      chain.catch(stop);
    });
    bb.on('error', (err: Error) => stop(new HttpFailure(400, `invalid multipart body: ${err.message}`)));
    // A client gone mid-body: busboy is never ended, so neither is the part being written.
    req.on('close', () => {
      if (!req.complete) stop(new HttpFailure(400, 'the upload broke off before its end'));
    });
    bb.on('close', resolveOrReject);
    req.pipe(bb);
  });
}
