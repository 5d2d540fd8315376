/**
 * IPv4 address ranges as sorted, disjoint [start, end] intervals. nftables refuses an anonymous set whose elements
 * overlap ("conflicting intervals"), and a NetworkPolicy's `ipBlock.except` is a subtraction nft has no operator
 * for, so rules reach the renderer as intervals this file has already merged and subtracted.
 */
import { isIPv4 } from 'node:net';

export type Interval = readonly [number, number];

const MAX = 0xffffffff;

function ipv4ToInt(a: string): number {
  return a.split('.').reduce((n, o) => n * 256 + Number(o), 0);
}

export function intToIpv4(n: number): string {
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
}

/** The interval of an IPv4 address or CIDR; undefined for IPv6 (the guest has none) or anything else. */
export function ipv4Interval(cidr: string): Interval | undefined {
  const [addr = '', bits] = cidr.split('/');
  if (!isIPv4(addr)) return undefined;
  const len = bits === undefined ? 32 : Number(bits);
  if (!Number.isInteger(len) || len < 0 || len > 32) return undefined;
  const size = 2 ** (32 - len);
  const start = Math.floor(ipv4ToInt(addr) / size) * size;
  return [start, start + size - 1];
}

/** Sorted and merged (adjacent intervals join). */
export function union(list: readonly Interval[]): Interval[] {
  const sorted = [...list].sort((a, b) => a[0] - b[0]);
  const out: [number, number][] = [];
  for (const [s, e] of sorted) {
    const last = out[out.length - 1];
    if (last && s <= last[1] + 1) last[1] = Math.max(last[1], e);
    else out.push([s, e]);
  }
  return out;
}

/** `from` minus `minus`, both taken as unions. */
export function subtract(from: readonly Interval[], minus: readonly Interval[]): Interval[] {
  let out = union(from);
  for (const [ms, me] of union(minus)) {
    const next: Interval[] = [];
    for (const [s, e] of out) {
      if (me < s || ms > e) {
        next.push([s, e]);
        continue;
      }
      if (s < ms) next.push([s, ms - 1]);
      if (e > me) next.push([me + 1, e]);
    }
    out = next;
  }
  return out;
}

/** CIDRs (IPv6 ones dropped) minus exceptions, as disjoint intervals; `[]` in `to` means every address. */
export function destinations(to: readonly string[], except: readonly string[] = []): Interval[] {
  const base = to.length ? to.map(ipv4Interval).filter((x): x is Interval => !!x) : [[0, MAX] as Interval];
  return subtract(
    base,
    except.map(ipv4Interval).filter((x): x is Interval => !!x),
  );
}

export function isEverything(list: readonly Interval[]): boolean {
  return list.length === 1 && list[0]![0] === 0 && list[0]![1] === MAX;
}

/** nft set syntax for disjoint intervals: `{ 10.0.0.0-10.255.255.255, 1.1.1.1 }`. */
export function nftSet(list: readonly Interval[]): string {
  return `{ ${list.map(([s, e]) => (s === e ? intToIpv4(s) : `${intToIpv4(s)}-${intToIpv4(e)}`)).join(', ')} }`;
}
