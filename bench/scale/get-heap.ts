/**
 * bench/scale/get-heap — heap allocated by one resolved Get at the fleet's real size: sandbox-apiserver's own store
 * (SandboxStore) fed by its own NodeFeed from every node's change feed, as the server builds it, then bursts of Gets
 * by name (index lookup, the Sandbox materialized, serialized), measured as bench/apiserver-get-memory measures
 * (a young generation large enough that no scavenge happens in a burst; the median of 5 bursts). bench/scale runs it
 * as a child process at each fleet size; it prints one JSON line.
 *
 *   node --expose-gc --max-semi-space-size=256 --import tsx bench/scale/get-heap.ts --nodes n0=host:port,... --token-file F
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import { EventLog } from '../../src/apiserver/sandboxes/event-log.js';
import { NodeFeed } from '../../src/apiserver/sandboxes/node-feed.js';
import { SandboxdClient } from '../../src/apiserver/sandboxes/sandboxd-client.js';
import { SandboxStore } from '../../src/apiserver/sandboxes/store.js';
import { silentLogger } from '../../src/log/logger.js';
import { heapPerGet } from '../support/heap-per-get.js';

const { values } = parseArgs({
  options: {
    nodes: { type: 'string' },
    'token-file': { type: 'string' },
    gets: { type: 'string', default: '2000' },
    expect: { type: 'string', default: '1' },
  },
});
const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error('run with --expose-gc (see the header)');

const client = new SandboxdClient({ token: readFileSync(values['token-file']!, 'utf8').trim() });
const store = new SandboxStore(silentLogger, new EventLog(1000));
const nodes = values.nodes!.split(',').map((s) => s.split('=') as [string, string]);
const synced = new Set<string>();
const feeds = nodes.map(([node, address]) => {
  const feed = new NodeFeed(
    node,
    address,
    client,
    store,
    { onState: (n, ok) => (ok ? synced.add(n) : synced.delete(n)), onPools: () => {} },
    silentLogger,
  );
  feed.start();
  return feed;
});
const deadline = Date.now() + 120_000;
while (synced.size < nodes.length || store.size < Number(values.expect)) {
  if (Date.now() > deadline) throw new Error(`feeds: ${synced.size}/${nodes.length} synced, ${store.size} sandboxes`);
  await sleep(100);
}
for (const f of feeds) f.stop();

const keys = [...store.keysFrom('')];
const gets = Number(values.gets);
const names = Array.from({ length: gets }, (_, i) => keys[(i * 7919) % keys.length]!);
const bytesPerGet = heapPerGet(store, names);
gc();
process.stdout.write(
  `${JSON.stringify({ size: store.size, bytesPerGet, storeHeapMiB: process.memoryUsage().heapUsed / 2 ** 20 })}\n`,
);
process.exit(0);
