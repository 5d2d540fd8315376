/**
 * The cluster's own floors for a warm claim, measured in the same cluster just before the claims: one write observed
 * through a watch, and the three-write chain a warm claim is, on bare ConfigMaps with no operator in it.
 */
import { ConfigMaps, type KubeClient, type KubeObject } from '../src/kube/index.js';
import { percentile, watchAll } from './claim-driver.js';

/** p50/p95/p99 of a floor, ms. */
export interface Spread {
  p50: number;
  p95: number;
  p99: number;
}

function spread(latencies: number[]): Spread {
  const s = [...latencies].sort((a, b) => a - b);
  return {
    p50: +percentile(s, 50).toFixed(2),
    p95: +percentile(s, 95).toFixed(2),
    p99: +percentile(s, 99).toFixed(2),
  };
}

/**
 * The floor on this machine at this moment: one write (ConfigMap create) observed through a watch, serial. A warm
 * claim is three writes and two watch deliveries, so this puts its latency in context.
 */
export async function writeFloor(c: KubeClient, ns: string, n = 30): Promise<Spread> {
  const start = await c.list(ConfigMaps, ns, { limit: 1 });
  return timeCreates(c, ns, `floor-${Date.now()}-`, n, start.metadata.resourceVersion!, () => true);
}

/**
 * Create ConfigMaps `<prefix><i>` from `concurrency` workers, each serially, each until this client's watch (from
 * `fromRv`) shows it `done`: the spread of those times.
 */
async function timeCreates(
  c: KubeClient,
  ns: string,
  prefix: string,
  n: number,
  fromRv: string,
  done: (o: KubeObject & { data?: Record<string, string> }) => boolean,
  concurrency = 1,
): Promise<Spread> {
  const seen = new Map<string, (t: number) => void>();
  const stop = new AbortController();
  const watching = watchAll<KubeObject & { data?: Record<string, string> }>(
    c,
    ConfigMaps,
    ns,
    fromRv,
    (_t, o) => {
      if (done(o)) seen.get(o.metadata.name!)?.(performance.now());
    },
    stop.signal,
  );
  const out: number[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < n) {
        const name = `${prefix}${next++}`;
        const got = new Promise<number>((r) => seen.set(name, r));
        const t = performance.now();
        await c.create(ConfigMaps, { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name, namespace: ns } });
        out.push((await got) - t);
      }
    }),
  );
  stop.abort();
  await watching;
  return spread(out);
}

/**
 * The floor of a warm claim's write chain without the operator: the bench client creates a ConfigMap ("claim"); a
 * second client (its own connection, like the operator) sees it through a watch, merge-patches another ConfigMap
 * guarded by its resourceVersion ("adoption"), then patches the first ("status"); the bench client's watch sees
 * that. Three serial writes and two watch deliveries on the cheapest kind there is: what no claim can beat here.
 * With `concurrency` > 1, that many chains run at once (each against its own peer, as claims take different
 * Sandboxes): what no claim at that concurrency can beat.
 */
export async function chainFloor(
  c: KubeClient,
  reactor: KubeClient,
  ns: string,
  n = 40,
  concurrency = 1,
): Promise<Spread> {
  const stop = new AbortController();
  const reactions = new Set<Promise<void>>();
  const tag = String(Date.now());
  const peers: KubeObject[] = [];
  for (let i = 0; i < concurrency; i++)
    peers.push(
      await reactor.create<KubeObject>(ConfigMaps, {
        apiVersion: 'v1',
        kind: 'ConfigMap',
        metadata: { name: `chain-peer-${tag}-${i}`, namespace: ns },
      }),
    );
  const free = peers.map((_, i) => i);
  const start = await c.list(ConfigMaps, ns, { limit: 1 });
  const rv = start.metadata.resourceVersion!;
  const prefix = `chain-c-${tag}-`;
  const reacting = watchAll<KubeObject>(
    reactor,
    ConfigMaps,
    ns,
    rv,
    (type, o) => {
      const name = o.metadata.name!;
      if (type !== 'ADDED' || !name.startsWith(prefix)) return;
      // Each chain guards its write with the resourceVersion of a peer no other chain is writing at that moment
      // (at most `concurrency` chains are in flight, so one is always free).
      const i = free.pop()!;
      const reaction = (async () => {
        const peer = peers[i]!;
        peers[i] = await reactor.patch<KubeObject>(
          ConfigMaps,
          ns,
          peer.metadata.name!,
          { metadata: { resourceVersion: peer.metadata.resourceVersion, labels: { owner: name } } },
          'merge',
        );
        free.push(i);
        await reactor.patch(ConfigMaps, ns, name, { data: { ready: 'true' } }, 'merge');
      })()
        .catch((err: unknown) => void process.stderr.write(`chain floor: ${String(err)}\n`))
        .finally(() => reactions.delete(reaction));
      reactions.add(reaction);
    },
    stop.signal,
  );
  try {
    return await timeCreates(c, ns, prefix, n, rv, (o) => o.data?.ready === 'true', concurrency);
  } finally {
    stop.abort();
    // The client can see the status patch before the reactor has its response: let that response arrive.
    await Promise.all([reacting, ...reactions]);
  }
}
