/**
 * Warm pool membership kept incrementally from Sandbox informer events (docs/extensions.md "Warm pool"), so a pool
 * reconcile reads its counts in O(1) instead of listing members: per pool UID, the non-deleting members, which are
 * Ready, which are not (for the readiness grace), and which template generation (`<ref-hash>|<blueprint-hash>`) each
 * carries (for drift). Also the creation/deletion expectations: a pool does not create or delete again while earlier
 * writes are unobserved.
 */
import { EXTENSIONS_GROUP, fnv1a32, LabelKeys } from '../../api/index.js';
import { controllerOf, refGroup } from '../../kube/index.js';
import { isSandboxReady, type SandboxObj } from './support.js';

export const EXPECTATIONS_TTL_MS = 5 * 60_000;

export interface PoolStats {
  members: Set<string>;
  ready: Set<string>;
  notReady: Set<string>;
  /** `<template-ref-hash>|<template-hash>` -> member names. */
  byGeneration: Map<string, Set<string>>;
  /** Owned members missing `launch-type=warm` (back-filled by the pool). */
  unlabelled: Set<string>;
}

interface Expectations {
  adds: number;
  dels: number;
  since: number;
}

export function generationKey(sb: SandboxObj): string {
  const l = sb.metadata.labels ?? {};
  return `${l[LabelKeys.sandboxTemplateRefHash] ?? ''}|${l[LabelKeys.sandboxTemplateHash] ?? ''}`;
}

const hashes = new Map<string, string>();
/** fnv1a32 memoized for pool names (called on every Sandbox event). */
export function poolHash(name: string): string {
  let h = hashes.get(name);
  if (h === undefined) {
    if (hashes.size > 10_000) hashes.clear();
    hashes.set(name, (h = fnv1a32(name)));
  }
  return h;
}

/** The pool UID a Sandbox counts toward, or undefined (not a member). */
export function memberOf(sb: SandboxObj): string | undefined {
  if (sb.metadata.deletionTimestamp) return undefined;
  const ref = controllerOf(sb);
  if (!ref || ref.kind !== 'SandboxWarmPool' || refGroup(ref) !== EXTENSIONS_GROUP) return undefined;
  if (sb.metadata.labels?.[LabelKeys.warmPoolSandbox] !== poolHash(ref.name)) return undefined;
  return ref.uid;
}

export class PoolMembership {
  private readonly stats = new Map<string, PoolStats>();
  private readonly expectations = new Map<string, Expectations>();

  get(poolUid: string): PoolStats {
    let s = this.stats.get(poolUid);
    if (!s) {
      s = { members: new Set(), ready: new Set(), notReady: new Set(), byGeneration: new Map(), unlabelled: new Set() };
      this.stats.set(poolUid, s);
    }
    return s;
  }

  forgetPool(poolUid: string): void {
    this.stats.delete(poolUid);
    this.expectations.delete(poolUid);
  }

  /** Apply one informer event (old and/or new view of a Sandbox). O(1). */
  observe(oldSb: SandboxObj | undefined, newSb: SandboxObj | undefined): void {
    const oldPool = oldSb ? memberOf(oldSb) : undefined;
    const newPool = newSb ? memberOf(newSb) : undefined;
    if (oldSb && oldPool !== undefined) this.unlink(oldPool, oldSb);
    if (newSb && newPool !== undefined) this.link(newPool, newSb);
    // Expectations: a new member appearing satisfies a create; a member going away by deletion satisfies a delete.
    if (newPool !== undefined && oldPool !== newPool) this.lower(newPool, 'adds');
    const deleted = !newSb || (newSb.metadata.deletionTimestamp && !oldSb?.metadata.deletionTimestamp);
    if (deleted && oldPool !== undefined) this.lower(oldPool, 'dels');
  }

  private link(pool: string, sb: SandboxObj): void {
    const s = this.get(pool);
    const name = sb.metadata.name!;
    s.members.add(name);
    (isSandboxReady(sb) ? s.ready : s.notReady).add(name);
    const g = generationKey(sb);
    let set = s.byGeneration.get(g);
    if (!set) s.byGeneration.set(g, (set = new Set()));
    set.add(name);
    if (sb.metadata.labels?.[LabelKeys.launchType] !== 'warm') s.unlabelled.add(name);
  }

  private unlink(pool: string, sb: SandboxObj): void {
    const s = this.stats.get(pool);
    if (!s) return;
    const name = sb.metadata.name!;
    s.members.delete(name);
    s.ready.delete(name);
    s.notReady.delete(name);
    const g = generationKey(sb);
    const set = s.byGeneration.get(g);
    set?.delete(name);
    if (set?.size === 0) s.byGeneration.delete(g);
    s.unlabelled.delete(name);
  }

  expect(poolUid: string, kind: 'adds' | 'dels', n: number): void {
    let e = this.expectations.get(poolUid);
    if (!e) this.expectations.set(poolUid, (e = { adds: 0, dels: 0, since: Date.now() }));
    if (e.adds === 0 && e.dels === 0) e.since = Date.now();
    e[kind] += n;
  }

  lower(poolUid: string, kind: 'adds' | 'dels', n = 1): void {
    const e = this.expectations.get(poolUid);
    if (e) e[kind] = Math.max(0, e[kind] - n);
  }

  /** True when every create/delete this pool issued has been observed (or the record expired). */
  satisfied(poolUid: string, now = Date.now()): boolean {
    const e = this.expectations.get(poolUid);
    if (!e || (e.adds === 0 && e.dels === 0)) return true;
    if (now - e.since > EXPECTATIONS_TTL_MS) {
      this.expectations.delete(poolUid);
      return true;
    }
    return false;
  }
}
