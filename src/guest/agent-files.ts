/**
 * Files in the guest over the agent connection: read and write (streamed in chunks, size-capped), stat, list,
 * mkdir, move, remove, and directory watches.
 */
import { SandboxError } from '../errors.js';
import type { AgentClient } from './agent-client.js';
import { check, FileStatSchema, ListResult, SizeResult, WatchEventSchema } from './agent-schemas.js';

// What the guest answers is checked against these before it is read (agent-schemas.ts).
const STAT = check(FileStatSchema);
const LIST = check(ListResult);
const SIZE = check(SizeResult);
const WATCH_EVENT = check(WatchEventSchema);

export interface FileStat {
  path: string;
  name: string;
  type: 'file' | 'dir' | 'symlink' | 'other';
  size: number;
  mode: number;
  mtimeMs: number;
  /** Owner (agents that report it). */
  uid?: number;
  gid?: number;
  target?: string;
  /** The file's metadata (e2b's, kept as extended attributes; followed through a symlink), when it has some. */
  metadata?: Record<string, string>;
}

export interface WatchEvent {
  op: 'create' | 'write' | 'remove' | 'rename' | 'chmod';
  path: string;
}

export interface WriteOptions {
  mode?: number;
  append?: boolean;
  parents?: boolean;
  /** Owner of the file (agents that take it; older ones leave it root's). */
  uid?: number;
  gid?: number;
  timeoutMs?: number;
  signal?: AbortSignal;
  /**
   * The file's whole metadata once written (keys not named are removed; `{}` clears it); undefined leaves it as it
   * is. Agents with the `metadata` feature only: older ones would ignore it.
   */
  metadata?: Record<string, string>;
}

export class AgentFiles {
  constructor(private readonly client: AgentClient) {}

  async read(
    path: string,
    opts: { offset?: number; length?: number; maxBytes?: number; timeoutMs?: number } = {},
  ): Promise<Buffer> {
    const max = opts.maxBytes ?? 64 << 20;
    const chunks: Buffer[] = [];
    let size = 0;
    let tooBig = false;
    await this.client.request(
      'file.read',
      { path, offset: opts.offset, length: opts.length },
      {
        timeoutMs: opts.timeoutMs,
        result: SIZE,
        onOut: (b) => {
          size += b.length;
          if (size > max) tooBig = true;
          else chunks.push(b);
        },
      },
    );
    if (tooBig) {
      throw new SandboxError('agent.file-too-large', `${path} is larger than ${max} bytes`, {
        hint: 'pass a larger maxBytes or read a range with offset/length',
      });
    }
    return Buffer.concat(chunks);
  }

  async readText(path: string): Promise<string> {
    return (await this.read(path)).toString('utf8');
  }

  async write(path: string, data: Buffer | string, opts: WriteOptions = {}): Promise<number> {
    const b = typeof data === 'string' ? Buffer.from(data) : data;
    const step = 256 << 10;
    async function* chunks() {
      for (let off = 0; off < b.length; off += step) yield b.subarray(off, off + step);
    }
    return this.writeStream(path, chunks(), opts);
  }

  /**
   * Write a file from chunks as they come (an upload streamed from a client): each chunk is sent within the
   * stream's credit, so a slow guest holds the source back instead of buffering it here.
   */
  async writeStream(path: string, source: AsyncIterable<Buffer>, opts: WriteOptions = {}): Promise<number> {
    return (await this.upload(path, source, opts)).size;
  }

  /** writeStream, answering also with the metadata the file holds once written (when `opts.metadata` was given). */
  async upload(
    path: string,
    source: AsyncIterable<Buffer>,
    opts: WriteOptions = {},
  ): Promise<{ size: number; metadata?: Record<string, string> }> {
    let metadata = opts.metadata;
    if (metadata !== undefined && !this.client.info.features.includes('metadata')) {
      // An older agent keeps none, so there is none to clear; pairs to keep it would silently drop.
      if (Object.keys(metadata).length)
        throw new SandboxError('agent.version', 'this guest agent keeps no file metadata', {
          hint: 'rebuild the guest image (its agent predates the metadata feature)',
        });
      metadata = undefined;
    }
    // A source that fails (an upload over its cap, a client gone mid-body, a corrupt gzip) cancels the guest's write:
    // left alone, the agent's write waited for input for ever with the file open, holding one of its stream slots
    // (1024, shared with exec and reads), so enough failed uploads stopped the sandbox answering at all.
    const cancel = new AbortController();
    const signal = opts.signal ? AbortSignal.any([opts.signal, cancel.signal]) : cancel.signal;
    const { id, done } = this.client.start(
      'file.write',
      {
        path,
        mode: opts.mode,
        append: opts.append,
        parents: opts.parents,
        uid: opts.uid,
        gid: opts.gid,
        metadata,
      },
      { timeoutMs: opts.timeoutMs, signal, result: SIZE },
    );
    done.catch(() => undefined);
    const input = this.client.streamInput(id);
    const step = 256 << 10;
    try {
      for await (const chunk of source) {
        for (let off = 0; off < chunk.length; off += step) {
          this.client.assertOpen();
          if (!input.write(chunk.subarray(off, off + step))) await Promise.race([input.drained(), done]);
        }
      }
    } catch (err) {
      cancel.abort(err);
      throw err;
    }
    this.client.assertOpen();
    input.end();
    const res = await done;
    return { size: res.size as number, metadata: res.metadata as Record<string, string> | undefined };
  }

  /**
   * Read a file as it comes: `onChunk` gets each chunk, and a promise it returns holds the guest back until it
   * settles (a download to a slow client). Resolves with the file's size.
   */
  async readStream(
    path: string,
    onChunk: (b: Buffer) => unknown,
    opts: { offset?: number; length?: number; timeoutMs?: number; signal?: AbortSignal } = {},
  ): Promise<number> {
    const res = await this.client.request(
      'file.read',
      { path, offset: opts.offset, length: opts.length },
      { timeoutMs: opts.timeoutMs, signal: opts.signal, onOut: onChunk, result: SIZE },
    );
    return res.size as number;
  }

  async stat(path: string): Promise<FileStat> {
    return (await this.client.request('file.stat', { path }, { result: STAT })) as unknown as FileStat;
  }

  async exists(path: string): Promise<boolean> {
    try {
      await this.stat(path);
      return true;
    } catch (err) {
      if (err instanceof SandboxError && err.code === 'agent.enoent') return false;
      throw err;
    }
  }

  async list(path: string, opts: { depth?: number } = {}): Promise<{ entries: FileStat[]; truncated: boolean }> {
    const res = await this.client.request('file.list', { path, depth: opts.depth }, { result: LIST });
    return { entries: res.entries as FileStat[], truncated: res.truncated === true };
  }

  async mkdir(
    path: string,
    opts: { parents?: boolean; mode?: number; uid?: number; gid?: number } = {},
  ): Promise<void> {
    await this.client.request('file.mkdir', {
      path,
      parents: opts.parents,
      mode: opts.mode,
      uid: opts.uid,
      gid: opts.gid,
    });
  }

  async move(from: string, to: string): Promise<void> {
    await this.client.request('file.move', { path: from, to });
  }

  async remove(path: string, opts: { recursive?: boolean } = {}): Promise<void> {
    await this.client.request('file.remove', { path, recursive: opts.recursive });
  }

  /** Watch a directory; resolves once the watch is in place. */
  async watch(
    path: string,
    onEvent: (e: WatchEvent) => void,
    opts: { recursive?: boolean; allowNetworkMounts?: boolean } = {},
  ): Promise<{ close(): Promise<void>; done: Promise<void> }> {
    let ready!: () => void;
    const readyP = new Promise<void>((r) => (ready = r));
    const { id, done } = this.client.start(
      'file.watch',
      { path, recursive: opts.recursive, allowNetworkMounts: opts.allowNetworkMounts },
      {
        timeoutMs: 0,
        event: WATCH_EVENT,
        onEvent: (e) => {
          if (e.type === 'watching') ready();
          else if (e.type === 'fs') onEvent({ op: e.op as WatchEvent['op'], path: String(e.path) });
        },
      },
    );
    await Promise.race([readyP, done]);
    const finished = done.then(() => undefined);
    finished.catch(() => undefined);
    return {
      done: finished,
      close: async () => {
        await this.client.request('cancel', { target: id }).catch(() => undefined);
        await finished.catch(() => undefined);
      },
    };
  }
}
