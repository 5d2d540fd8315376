/**
 * A watch's initial state written to a client that reads slowly, over a real socket (no cluster): every object
 * arrives, and the response does not collect one listener per wait for 'drain' (a 50k fleet's initial state waits
 * thousands of times on one response; one 'close' listener was left per wait and Node warned MaxListenersExceeded).
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, request, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import type { Renderer } from '../../src/apiserver/render.js';
import { WatchStream } from '../../src/apiserver/watch-stream.js';

interface Item {
  name: string;
  rv: string;
  pad: string;
}

const renderer: Renderer<Item> = {
  apiVersion: 'test/v1',
  listKind: 'ItemList',
  columns: [],
  toObject: (i) => ({
    apiVersion: 'test/v1',
    kind: 'Item',
    metadata: { name: i.name, resourceVersion: i.rv },
    pad: i.pad,
  }),
  metadataOf: (i) => ({ name: i.name, resourceVersion: i.rv }),
};

const ITEMS: Item[] = Array.from({ length: 1500 }, (_, i) => ({
  name: `i-${i}`,
  rv: String(i + 1),
  pad: 'x'.repeat(2048),
}));

describe('WatchStream initial state under backpressure', () => {
  let server: ReturnType<typeof createServer>;
  let port = 0;
  const warnings: Error[] = [];
  const onWarning = (w: Error) => warnings.push(w);
  let mostCloseListeners = 0;
  let drainWaits = 0;
  let done: Promise<void> = Promise.resolve();

  before(async () => {
    process.on('warning', onWarning);
    server = createServer((_req, res: ServerResponse) => {
      const stream = new WatchStream<Item>({
        res,
        renderer,
        shape: { kind: 'object' },
        query: new URLSearchParams(),
        matches: () => true,
        bookmark: (rv, end) => ({
          kind: 'Item',
          apiVersion: 'test/v1',
          metadata: { resourceVersion: rv, ...(end ? { annotations: { 'k8s.io/initial-events-end': 'true' } } : {}) },
        }),
        bookmarks: true,
        timeoutMs: 60_000,
        onClose: () => {},
      });
      // Counts what initial() leaves on the response each time the socket buffer fills.
      const write = res.write.bind(res) as (chunk: string) => boolean;
      res.write = ((chunk: string) => {
        const ok = write(chunk);
        if (!ok) drainWaits++;
        mostCloseListeners = Math.max(mostCloseListeners, res.listenerCount('close'));
        return ok;
      }) as typeof res.write;
      done = stream.initial(ITEMS, String(ITEMS.length)).then(() => stream.close());
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    port = (server.address() as AddressInfo).port;
  });

  after(() => {
    process.off('warning', onWarning);
    server.close();
  });

  it('delivers every object and keeps the listeners on the response bounded', async () => {
    const lines: string[] = [];
    await new Promise<void>((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port, path: '/' }, (res) => {
        res.setEncoding('utf8');
        let buf = '';
        res.on('data', (chunk: string) => {
          buf += chunk;
          let nl: number;
          while ((nl = buf.indexOf('\n')) >= 0) {
            lines.push(buf.slice(0, nl));
            buf = buf.slice(nl + 1);
          }
          // A slow reader: the server's socket buffer fills again and again.
          res.pause();
          void sleep(1).then(() => res.resume());
        });
        res.on('end', resolve);
        res.on('error', reject);
      });
      req.on('error', reject);
      req.end();
    });
    await done;
    await sleep(10); // a warning is emitted on the next tick
    const events = lines.map((l) => JSON.parse(l) as { type: string; object: { metadata: { name?: string } } });
    assert.equal(events.filter((e) => e.type === 'ADDED').length, ITEMS.length);
    assert.equal(events.at(-1)?.type, 'BOOKMARK');
    assert.ok(drainWaits >= 20, `the client must have held the server back (${drainWaits} waits for drain)`);
    assert.ok(mostCloseListeners <= 4, `'close' listeners on the response peaked at ${mostCloseListeners}`);
    assert.deepEqual(
      warnings.filter((w) => w.name === 'MaxListenersExceededWarning').map((w) => w.message),
      [],
    );
  });
});
