/**
 * File metadata as envd 0.6.2 takes it: each `X-Metadata-<key>: <value>` header of an upload is a pair kept with the
 * uploaded file (the guest agent stores it as extended attributes, docs/e2b.md "envd versions"), returned on the upload's
 * entries and on every EntryInfo (Stat, ListDir, Move, MakeDir, watch entries). Keys are lowercased, as HTTP header
 * names are case-blind; an upload replaces the file's whole set (one without headers clears it), as envd does.
 */
import { HttpFailure } from './errors.js';

const PREFIX = 'x-metadata-';
/** envd's limits: a key fits a 255-byte xattr name after `user.e2b.`; a file's pairs fit one 4 KiB block. */
export const MAX_METADATA_KEY = 255 - 'user.e2b.'.length;
export const MAX_METADATA_TOTAL = 4096;

const PRINTABLE = /^[\x20-\x7e]*$/;

/**
 * The metadata of an upload's headers (node's `headersDistinct`: lowercased names, every value of each). A header
 * sent twice counts with its first value, and `X-Metadata-` without a key is ignored, as envd does; anything envd
 * refuses (a byte outside printable US-ASCII, a key or set over its limits) is a 400 naming it.
 */
export function metadataFromHeaders(headers: NodeJS.Dict<string[]>): Record<string, string> {
  // A Map, then fromEntries: a key such as `__proto__` is kept as a pair, not taken as the object's prototype.
  const meta = new Map<string, string>();
  let total = 0;
  for (const [name, values] of Object.entries(headers)) {
    if (!name.toLowerCase().startsWith(PREFIX) || !values?.length) continue;
    const key = name.slice(PREFIX.length).toLowerCase();
    if (!key) continue;
    const value = values[0]!;
    if (key.length > MAX_METADATA_KEY)
      throw new HttpFailure(400, `invalid metadata: key ${JSON.stringify(key)} exceeds ${MAX_METADATA_KEY} bytes`);
    if (!PRINTABLE.test(key) || !PRINTABLE.test(value))
      throw new HttpFailure(
        400,
        `invalid metadata: the key ${JSON.stringify(key)} or its value is not printable US-ASCII (0x20-0x7e)`,
      );
    meta.set(key, value);
    total += 'user.e2b.'.length + key.length + value.length;
  }
  if (total > MAX_METADATA_TOTAL)
    throw new HttpFailure(
      400,
      `invalid metadata: ${total} bytes in all (each pair counted with its user.e2b. prefix) exceeds ${MAX_METADATA_TOTAL}`,
    );
  return Object.fromEntries(meta);
}
