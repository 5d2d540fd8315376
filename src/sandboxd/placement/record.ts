import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { Type, type Static } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { SandboxError } from '../../errors.js';
import { NETS, SIZES } from '../pool-key.js';

/**
 * A checkpoint record as it moves between nodes (docs/placement.md): `meta.json` (identity, pool key, lineage and
 * the size and SHA-256 of every file) and the export directory, the snapshot as the store keeps it in
 * `<data-dir>/checkpoints/<id>/`. The checksums are taken once, when the checkpoint is made, and checked by every
 * node that pulls it, so a pull that was cut short, corrupted on the way or read from a damaged disk is rejected.
 */

/** The files of a checkpoint's export directory, in the order they are sent (the large one last). */
export const RECORD_FILES = ['template.json', 'state', 'mem'] as const;

export const CHECKPOINT_ID = /^ck_[0-9a-f]{16}$/;
export const META_FORMAT = 'sandboxd.checkpoint/v1';
/** meta.json and template.json are small; more is not a record. */
export const MAX_SMALL_FILE_BYTES = 64 << 10;

const FileDigestSchema = Type.Object(
  {
    path: Type.String({ pattern: '^[A-Za-z0-9._-]{1,64}$' }),
    size: Type.Integer({ minimum: 0 }),
    sha256: Type.String({ pattern: '^[0-9a-f]{64}$' }),
  },
  { additionalProperties: false },
);
export type FileDigest = Static<typeof FileDigestSchema>;

const MetaSchema = Type.Object(
  {
    format: Type.Literal(META_FORMAT),
    id: Type.String({ pattern: CHECKPOINT_ID.source }),
    name: Type.Optional(Type.String({ maxLength: 253 })),
    sandbox_id: Type.String({ maxLength: 64 }),
    claim_ref: Type.Optional(Type.String({ maxLength: 512 })),
    kind: Type.Optional(Type.Literal('hibernation')),
    key: Type.Object(
      {
        template: Type.String({ minLength: 1, maxLength: 253 }),
        net: Type.Union(NETS.map((n) => Type.Literal(n))),
        size: Type.Union(SIZES.map((s) => Type.Literal(s))),
      },
      { additionalProperties: false },
    ),
    created_at: Type.String({ maxLength: 40 }),
    /** Lineage: the node that took the checkpoint, and the nodes it was pulled through to get here. */
    origin: Type.String({ maxLength: 253 }),
    via: Type.Array(Type.String({ maxLength: 253 }), { maxItems: 64 }),
    files: Type.Array(FileDigestSchema, { minItems: 1, maxItems: 16 }),
  },
  { additionalProperties: false },
);
export type RecordMeta = Static<typeof MetaSchema>;

/** meta.json as sent; a SandboxError naming the first problem when it is not one. */
export function parseMeta(text: string): RecordMeta {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (err) {
    throw new SandboxError('placement.bad-record', `meta.json is not JSON: ${(err as Error).message}`);
  }
  const first = Value.Errors(MetaSchema, v).First();
  if (first)
    throw new SandboxError('placement.bad-record', `meta.json: ${first.path || '/'} ${first.message}`, {
      hint: 'the peer serves a record this node cannot read; it is not published',
    });
  const meta = v as RecordMeta;
  const paths = meta.files.map((f) => f.path);
  if (new Set(paths).size !== paths.length)
    throw new SandboxError('placement.bad-record', 'meta.json: a file is listed twice');
  for (const want of RECORD_FILES)
    if (!paths.includes(want)) throw new SandboxError('placement.bad-record', `meta.json: no entry for export/${want}`);
  if (paths.length !== RECORD_FILES.length)
    throw new SandboxError('placement.bad-record', `meta.json: files other than ${RECORD_FILES.join(', ')} listed`);
  return meta;
}

/** Size and SHA-256 of one file, read as a stream (a checkpoint's RAM file is hundreds of MiB). */
export async function digestFile(dir: string, path: string): Promise<FileDigest> {
  const full = join(dir, path);
  const hash = createHash('sha256');
  let size = 0;
  for await (const chunk of createReadStream(full, { highWaterMark: 1 << 20 }) as AsyncIterable<Buffer>) {
    hash.update(chunk);
    size += chunk.length;
  }
  const st = await stat(full);
  if (st.size !== size) throw new SandboxError('placement.changed', `${full} changed while it was read`);
  return { path, size, sha256: hash.digest('hex') };
}

/** The digests of a record's files, in RECORD_FILES order. */
export async function digestRecord(dir: string): Promise<FileDigest[]> {
  const out: FileDigest[] = [];
  for (const f of RECORD_FILES) out.push(await digestFile(dir, f));
  return out;
}

/** One digest for the whole content (a promoted template's `content_digest`). */
export function contentDigest(files: readonly FileDigest[]): string {
  const h = createHash('sha256');
  for (const f of [...files].sort((a, b) => a.path.localeCompare(b.path)))
    h.update(`${f.path} ${f.size} ${f.sha256}\n`);
  return `sha256:${h.digest('hex')}`;
}
