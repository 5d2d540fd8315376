/**
 * A peer's answers as a sandboxd node reads them (src/sandboxd/placement/peer-client.ts `json`, which the hand-off
 * lookup of placement/handoff.ts uses): a real HTTP server answering what a hostile or broken peer would. Each is
 * an error for that peer (never an exception that escapes, never an unbounded read), and the lookup skips it.
 */
import assert from 'node:assert/strict';
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { silentLogger } from '../../src/log/logger.js';
import type { NodeEngine } from '../../src/sandboxd/engine.js';
import { RecordHandoff } from '../../src/sandboxd/placement/handoff.js';
import { PeerClient } from '../../src/sandboxd/placement/peer-client.js';

const answers: Record<string, (res: ServerResponse) => void> = {
  // 64 MiB of a JSON string, sent as fast as the socket takes it: the reader stops at its cap.
  huge: (res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.write('{"checkpoints":"');
    const chunk = Buffer.alloc(1 << 20, 'a');
    let left = 64;
    const more = () => {
      while (left > 0) {
        left--;
        if (!res.write(chunk)) return void res.once('drain', more);
      }
      res.end('"}');
    };
    more();
  },
  garbage: (res) => res.writeHead(200).end('{"checkpoints": [{"id": "ck_'),
  error: (res) => res.writeHead(500).end('{"error":"x"}'.repeat(100_000)),
  silent: () => undefined, // headers never come
  cut: (res) => {
    res.writeHead(200, { 'content-length': '1000' });
    res.write('{"checkpoints":[');
    res.socket?.destroy();
  },
};

describe('hostile peers: what a node reads of a peer’s answer is bounded and never escapes', () => {
  let server: Server;
  let base: string;
  const client = new PeerClient('token');

  before(async () => {
    server = createServer((req, res) => answers[(req.url ?? '').split('?')[0]!.slice(1)]?.(res));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    base = `127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(async () => {
    client.close();
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  });

  for (const [name, expected] of [
    ['huge', /more than 4194304 bytes/],
    ['garbage', /JSON/],
    ['error', /answered 500/],
    ['silent', /no answer .* within 500 ms/],
    ['cut', /aborted|socket hang up|ECONNRESET|premature close/i],
  ] as const)
    it(`${name}: an error for that peer`, async () => {
      const before = process.memoryUsage().rss;
      await assert.rejects(client.json(`${base}`, `/${name}`, 500), expected);
      assert.ok(process.memoryUsage().rss - before < 32 << 20, 'the answer was not read whole');
    });

  it('the hand-off lookup asks them all and finds no record (none of them breaks it)', async () => {
    const handoff = new RecordHandoff({
      engine: { listCheckpoints: () => [] } as unknown as NodeEngine,
      client,
      // Each "peer" is the server with one answer's path: the lookup's own path follows the `#`, a URL fragment,
      // which is never sent, so every request reaches that answer.
      peers: () => Object.keys(answers).map((a) => `${base}/${a}#`),
      self: () => 'me',
      logger: silentLogger,
      timeoutMs: 500,
    });
    assert.equal(await handoff.find('team/agent'), undefined);
  });
});
