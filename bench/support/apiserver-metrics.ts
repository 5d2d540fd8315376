/**
 * Counters out of Prometheus text, as bench/claim reads them from kube-apiserver's and the operator's /metrics:
 * requests by verb and resource, watch-cache re-initialisations, conversion webhook calls, etcd write latency
 * buckets; and the arithmetic on them (window differences, per-claim figures).
 */
/** Counter values by a key built from their labels (`verb resource[/subresource]`). */
export type Counts = Map<string, number>;

export function parseCounter(
  text: string,
  name: string,
  key: (labels: Record<string, string>) => string | undefined,
): Counts {
  const out: Counts = new Map();
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    const close = line.startsWith(`${name}{`) ? line.lastIndexOf('}') : name.length - 1;
    const labels: Record<string, string> = {};
    for (const m of line.slice(name.length + 1, close).matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[m[1]!] = m[2]!;
    const k = key(labels);
    if (k === undefined) continue;
    out.set(k, (out.get(k) ?? 0) + Number(line.slice(close + 1).trim()));
  }
  return out;
}

/** The sum of `name`'s samples whose labels match (a string: equal; a RegExp: matches). */
export function sumWhere(text: string, name: string, match: Record<string, string | RegExp>): number {
  const matches = (l: Record<string, string>) =>
    Object.entries(match).every(([k, v]) => (typeof v === 'string' ? l[k] === v : v.test(l[k] ?? '')));
  return parseCounter(text, name, (l) => (matches(l) ? '' : undefined)).get('') ?? 0;
}

const resourceKey = (l: Record<string, string>) =>
  l.resource ? `${l.resource}${l.subresource ? `/${l.subresource}` : ''}` : undefined;
/** kube-apiserver's requests by `VERB resource[/subresource]` (non-resource paths such as /metrics left out). */
export const apiserverCounts = (text: string) =>
  parseCounter(text, 'apiserver_request_total', (l) => {
    const r = resourceKey(l);
    return r && l.verb !== 'WATCH' ? `${l.verb} ${r}` : undefined;
  });
/** The operator's own requests (rest_client_requests_total), watches left out. */
export const operatorCounts = (text: string) =>
  parseCounter(text, 'rest_client_requests_total', (l) => (l.verb === 'watch' ? undefined : `${l.verb} ${l.resource}`));

/**
 * kube-apiserver's watch caches: re-initialisations (a full LIST from etcd, decoding every object) and watchers it
 * cut off for not keeping up, by resource.
 */
export const watchCacheCounts = (text: string) => {
  const out = parseCounter(text, 'apiserver_watch_cache_initializations_total', (l) => `relist ${l.resource ?? '?'}`);
  addInto(
    out,
    parseCounter(text, 'apiserver_terminated_watchers_total', (l) => `terminated watcher ${l.resource ?? '?'}`),
  );
  return out;
};

/** kube-apiserver's calls of the conversion webhook, by CRD and direction (failed ones marked). */
export const conversionCounts = (text: string) =>
  parseCounter(
    text,
    'apiserver_crd_conversion_webhook_duration_seconds_count',
    (l) =>
      `${l.crd_name ?? '?'} ${l.from_version ?? '?'}->${l.to_version ?? '?'}${l.succeeded === 'false' ? ' failed' : ''}`,
  );

/** kube-apiserver's view of etcd writes: cumulative bucket counts by upper bound (`le`), reads left out. */
export const etcdWriteBuckets = (text: string) =>
  parseCounter(text, 'etcd_request_duration_seconds_bucket', (l) =>
    /^(get|list)/i.test(l.operation ?? '') ? undefined : l.le,
  );

/** From cumulative buckets: the share of etcd writes slower than 50 and 100 ms, and the bucket holding the p99. */
export function etcdTail(buckets: Counts): Record<string, number | string> {
  const all = buckets.get('+Inf') ?? 0;
  if (!all) return { writes: 0 };
  const under = (le: string) => buckets.get(le) ?? 0;
  const bounds = [...buckets.keys()].filter((k) => k !== '+Inf').sort((a, b) => Number(a) - Number(b));
  const p99 = bounds.find((b) => under(b) >= 0.99 * all);
  return {
    writes: all,
    over50ms: +(1 - under('0.05') / all).toFixed(3),
    over100ms: +(1 - under('0.1') / all).toFixed(3),
    p99AtMostMs: p99 === undefined ? 'over the last bucket' : Number(p99) * 1000,
  };
}

export function diff(after: Counts, before: Counts): Counts {
  const out: Counts = new Map();
  for (const [k, v] of after) {
    const d = v - (before.get(k) ?? 0);
    if (d) out.set(k, d);
  }
  return out;
}

export function addInto(into: Counts, from: Counts, factor = 1): void {
  for (const [k, v] of from) into.set(k, (into.get(k) ?? 0) + v * factor);
}

export const total = (c: Counts) => [...c.values()].reduce((a, b) => a + b, 0);

/** Per-claim figures, rounded, largest first; entries under 0.05 per claim dropped. */
export function perClaim(c: Counts, claims: number): Record<string, number> {
  return Object.fromEntries(
    [...c]
      .map(([k, v]) => [k, +(v / claims).toFixed(2)] as const)
      .filter(([, v]) => Math.abs(v) >= 0.05)
      .sort((a, b) => b[1] - a[1]),
  );
}

export function byVerb(c: Counts): Counts {
  const out: Counts = new Map();
  for (const [k, v] of c) {
    const verb = k.split(' ')[0]!;
    out.set(verb, (out.get(verb) ?? 0) + v);
  }
  return out;
}
