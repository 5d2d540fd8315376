import { isDeepStrictEqual } from 'node:util';

/**
 * Diff-before-write: the RFC 7386 JSON merge patch that turns `from` into `to`, or undefined when they are
 * equal — so a reconcile that changes nothing makes no API write at all.
 * Arrays are replaced whole (merge-patch semantics); keys missing from `to` become null (deletions).
 */
export function mergePatch(from: unknown, to: unknown): unknown {
  if (isDeepStrictEqual(from, to)) return undefined;
  if (!isPlainObject(from) || !isPlainObject(to)) return to === undefined ? null : to;
  const patch: Record<string, unknown> = {};
  for (const key of Object.keys(from))
    if (!(key in to) || to[key] === undefined) {
      if (from[key] !== undefined) patch[key] = null;
    }
  for (const [key, value] of Object.entries(to)) {
    if (value === undefined) continue;
    const sub = mergePatch(from[key], value);
    if (sub !== undefined) patch[key] = sub;
  }
  return Object.keys(patch).length ? patch : undefined;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Apply a merge patch locally (for optimistic local views and tests). */
export function applyMergePatch<T>(target: T, patch: unknown): T {
  if (!isPlainObject(patch)) return patch as T;
  const out: Record<string, unknown> = isPlainObject(target) ? { ...target } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = applyMergePatch(out[k], v);
  }
  return out as T;
}
