/**
 * The guest's writable layer as a byte stream (agent/upper.go; docs/agent-protocol.md "Writable layer"): what a
 * filesystem-only pause keeps of a sandbox. The host never unpacks it (the guest is hostile): `saveLayer` writes the
 * bytes to a file, refusing past a cap, and `restoreLayer` feeds that file back to a fresh VM of the same sandbox,
 * whose agent applies it through its merged root.
 */
import { createReadStream, createWriteStream } from 'node:fs';
import { once } from 'node:events';
import { rm } from 'node:fs/promises';
import { SandboxError } from '../errors.js';
import type { AgentClient } from './agent-client.js';
import { check, SizeResult } from './agent-schemas.js';

const SIZE = check(SizeResult);

/** Whether this guest's agent can save and restore its layer (agents built before the feature cannot). */
export function hasLayerFeature(client: AgentClient): boolean {
  return client.info.features.includes('layer');
}

function assertLayerFeature(client: AgentClient): void {
  if (!hasLayerFeature(client))
    throw new SandboxError('agent.version', 'this guest agent cannot save its files for a filesystem pause', {
      hint: 'rebuild the guest image (its agent predates the layer feature); a memory pause works meanwhile',
    });
}

/**
 * Stream the guest's writable layer into `dest` (created or truncated). Past `maxBytes` the save is cancelled in the
 * guest, `dest` removed, and `sandboxd.layer-too-large` thrown: nothing changed for the sandbox. Resolves with the
 * bytes written.
 */
export async function saveLayer(
  client: AgentClient,
  dest: string,
  opts: { maxBytes: number; timeoutMs?: number },
): Promise<number> {
  assertLayerFeature(client);
  const out = createWriteStream(dest, { mode: 0o600 });
  await once(out, 'open');
  const cancel = new AbortController();
  let size = 0;
  let over = false;
  let writeErr: unknown;
  let drain: Promise<void> | undefined;
  out.on('error', (err) => {
    writeErr = err;
    cancel.abort(err);
  });
  try {
    await client.request(
      'layer.save',
      {},
      {
        timeoutMs: opts.timeoutMs ?? 600_000,
        signal: cancel.signal,
        result: SIZE,
        onOut: (b) => {
          if (over || writeErr) return undefined;
          size += b.length;
          if (size > opts.maxBytes) {
            over = true;
            cancel.abort();
            return undefined;
          }
          // Holds the guest back while the disk is slower than the link (credit is granted as chunks settle): one
          // wait for every chunk that arrives meanwhile. A write error aborts the request instead (above).
          if (!out.write(b))
            drain ??= new Promise<void>((resolve) => out.once('drain', resolve)).finally(() => (drain = undefined));
          return drain;
        },
      },
    );
    out.end();
    await once(out, 'close');
    if (writeErr) throw writeErr;
    return size;
  } catch (err) {
    out.destroy();
    await rm(dest, { force: true });
    if (over)
      throw new SandboxError(
        'sandboxd.layer-too-large',
        `the sandbox's files are over ${opts.maxBytes} bytes, this node's limit for a filesystem pause; the sandbox was not paused`,
        { hint: 'remove files in the sandbox, pause it with its memory instead, or raise sandboxd --max-layer-mib' },
      );
    if (writeErr)
      throw new SandboxError(
        'sandboxd.state-write',
        "the node could not store the sandbox's files; it was not paused",
        {
          cause: writeErr,
          hint: "retry; if it persists, the node's disk needs attention (its log names the error)",
        },
      );
    throw err;
  }
}

/** Apply a layer saved by saveLayer to this (fresh) guest. Resolves with the entries the guest applied. */
export async function restoreLayer(
  client: AgentClient,
  src: string,
  opts: { timeoutMs?: number } = {},
): Promise<number> {
  assertLayerFeature(client);
  const cancel = new AbortController();
  const { id, done } = client.start(
    'layer.restore',
    {},
    { timeoutMs: opts.timeoutMs ?? 600_000, signal: cancel.signal },
  );
  done.catch(() => undefined);
  const input = client.streamInput(id);
  const step = 256 << 10;
  try {
    for await (const chunk of createReadStream(src, { highWaterMark: step }) as AsyncIterable<Buffer>) {
      client.assertOpen();
      if (!input.write(chunk)) await Promise.race([input.drained(), done]);
    }
  } catch (err) {
    cancel.abort(err);
    throw err;
  }
  client.assertOpen();
  input.end();
  const res = await done;
  return typeof res.entries === 'number' ? res.entries : 0;
}
