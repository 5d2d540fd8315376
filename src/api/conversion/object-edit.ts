/**
 * Immutable edits on plain JSON objects used by the conversions: annotation edits and RFC 7386 JSON merge
 * patches. Nothing here mutates its inputs; unchanged subtrees are shared with the input.
 */
import type { ObjectMeta } from '../meta.js';

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
export type JsonObject = { [key: string]: Json };

export function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * A copy of `meta` whose annotations lack `remove` and contain `set`. An annotation map left empty is dropped
 * (the apiserver does not distinguish an empty map from none).
 */
export function editAnnotations(
  meta: ObjectMeta | undefined,
  remove: readonly string[],
  set: Readonly<Record<string, string>> = {},
): ObjectMeta | undefined {
  const current = meta?.annotations;
  const needsRemove = current !== undefined && remove.some((k) => k in current);
  const setKeys = Object.keys(set);
  if (!needsRemove && setKeys.length === 0) return meta;
  const annotations: Record<string, string> = { ...current };
  for (const k of remove) delete annotations[k];
  Object.assign(annotations, set);
  const out: ObjectMeta = { ...meta };
  if (Object.keys(annotations).length === 0) delete out.annotations;
  else out.annotations = annotations;
  return out;
}

export function annotation(meta: ObjectMeta | undefined, key: string): string | undefined {
  return meta?.annotations?.[key];
}

/** The merge patch that turns `from` into `to` (undefined when they are equal). */
export function mergeDiff(from: unknown, to: unknown): Json | undefined {
  if (from === to) return undefined; // conversions share unchanged subtrees (pod templates) with their input
  if (isPlainObject(from) && isPlainObject(to)) {
    const patch: JsonObject = {};
    for (const key of Object.keys(to)) {
      if (to[key] === undefined) continue;
      if (!(key in from) || from[key] === undefined) {
        patch[key] = to[key] as Json;
        continue;
      }
      const sub = mergeDiff(from[key], to[key]);
      if (sub !== undefined) patch[key] = sub;
    }
    for (const key of Object.keys(from)) {
      if (from[key] !== undefined && (!(key in to) || to[key] === undefined)) patch[key] = null;
    }
    return Object.keys(patch).length === 0 ? undefined : patch;
  }
  if (jsonEqual(from, to)) return undefined;
  // A whole value (array, scalar, or an object replacing a non-object): applyMergePatch replaces it wholesale.
  return to as Json;
}

/** RFC 7386, except that an object patch over a non-object replaces it wholesale. */
export function applyMergePatch(target: unknown, patch: Json): unknown {
  if (!isPlainObject(patch)) return patch;
  if (!isPlainObject(target)) return stripNulls(patch);
  const out: Record<string, unknown> = { ...target };
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete out[key];
    else out[key] = applyMergePatch(out[key], value);
  }
  return out;
}

function stripNulls(patch: JsonObject): JsonObject {
  const out: JsonObject = {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) continue;
    out[k] = isPlainObject(v) ? stripNulls(v as JsonObject) : v;
  }
  return out;
}

/** Structural equality of JSON values (undefined object members count as absent). */
export function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== typeof b || a === null || b === null || typeof a !== 'object') return false;
  if (Array.isArray(a)) {
    if (!Array.isArray(b) || a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) if (!jsonEqual(a[i], b[i])) return false;
    return true;
  }
  if (Array.isArray(b)) return false;
  const ao = a as Record<string, unknown>;
  const bo = b as Record<string, unknown>;
  let count = 0;
  for (const key in ao) {
    if (ao[key] === undefined) continue;
    count++;
    if (!jsonEqual(ao[key], bo[key])) return false;
  }
  for (const key in bo) if (bo[key] !== undefined) count--;
  return count === 0;
}

/** Sets `obj[key] = value` only when value is defined, so converted objects never carry `undefined` members. */
export function put<T extends object, K extends keyof T>(obj: T, key: K, value: T[K] | undefined): void {
  if (value !== undefined) obj[key] = value;
}
