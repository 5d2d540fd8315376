/**
 * The timeouts of the e2b planes' streaming listeners (src/net/serve.ts): a request may stream for as long as the
 * client likes, but a connection that never finishes its headers is closed. Before, `requestTimeout: 0` alone made
 * Node's headersTimeout 0 too, and envd's listener and the e2b router kept such connections for ever.
 */
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { connect } from 'node:net';
import { after, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { SandboxRouter, type RouterOptions } from '../../src/apiserver/e2b/router.js';
import { listenOn, streamingServerOptions } from '../../src/net/serve.js';
import { ENVD_DEFAULT_REQUEST_TIMEOUT_MS, EnvdServer, type EnvdServerOptions } from '../../src/sandboxd/envd/server.js';

describe('streaming listeners', () => {
  const servers: Server[] = [];
  after(async () => {
    for (const s of servers) {
      s.closeAllConnections();
      await new Promise((r) => s.close(r));
    }
  });

  it('close a connection whose headers never finish, and let a started request stream past that deadline', async () => {
    const server = createServer(
      streamingServerOptions({ headersTimeoutMs: 400, connectionsCheckingIntervalMs: 50 }),
      (req, res) => {
        let n = 0;
        req.on('data', (d: Buffer) => (n += d.length));
        req.on('end', () => res.end(String(n)));
      },
    );
    servers.push(server);
    const { port } = await listenOn(server, '127.0.0.1', 0);

    const slow = connect(port, '127.0.0.1');
    slow.write('GET /health HTTP/1.1\r\nHost: x\r\n');
    const startedAt = Date.now();
    let answer = '';
    slow.on('data', (d: Buffer) => (answer += d.toString()));
    await new Promise((r) => slow.on('close', r));
    assert.ok(Date.now() - startedAt < 5_000, `closed after ${Date.now() - startedAt} ms`);
    assert.match(answer, /^HTTP\/1\.1 408/, 'answered Request Timeout');

    // Headers complete at once; the body takes three times the headers deadline.
    const streaming = connect(port, '127.0.0.1');
    let reply = '';
    streaming.on('data', (d: Buffer) => (reply += d.toString()));
    streaming.write('POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n');
    for (let i = 0; i < 6; i++) {
      streaming.write('2\r\nab\r\n');
      await sleep(200);
    }
    streaming.end('0\r\n\r\n');
    await new Promise((r) => streaming.on('close', r));
    assert.match(reply, /^HTTP\/1\.1 200/);
    assert.match(reply, /\r\n\r\n12$/, 'the whole body arrived');
  });

  it("are envd's listener and the e2b router", () => {
    const envd = new EnvdServer({ engine: { on: () => undefined } } as unknown as EnvdServerOptions);
    const router = new SandboxRouter({} as RouterOptions);
    for (const s of [envd.server, router.server]) assert.equal(s.headersTimeout, 60_000);
    // envd bounds how long a request (an upload) may take to arrive, not how long its answer streams (issue 28)
    assert.equal(envd.server.requestTimeout, ENVD_DEFAULT_REQUEST_TIMEOUT_MS);
    assert.equal(router.server.requestTimeout, 0);
  });
});
