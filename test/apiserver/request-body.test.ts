/**
 * Request bodies (src/apiserver/http.ts readJsonBody): one that does not arrive within its deadline is a 504 Timeout
 * Status and its connection is closed, so a client cannot hold a request open by sending its body a byte at a time
 * (the server has no whole-request deadline: watches are long); one that arrives in time is read as before.
 */
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { after, describe, it } from 'node:test';
import { readJsonBody, sendJson, sendStatus } from '../../src/apiserver/http.js';
import { toStatusFailure } from '../../src/apiserver/status.js';

describe('request body deadline', () => {
  const server = createServer((req, res) => {
    readJsonBody(req, 1 << 20, 300).then(
      (body) => sendJson(res, 200, { got: body }),
      (err: unknown) => sendStatus(res, toStatusFailure(err)),
    );
  });
  after(() => {
    server.closeAllConnections();
    return new Promise((r) => server.close(r));
  });

  const exchange = async (head: string, body: string, holdMs?: number) => {
    await new Promise<void>((r) => (server.listening ? r() : server.listen(0, '127.0.0.1', r)));
    const s = connect((server.address() as AddressInfo).port, '127.0.0.1');
    let answer = '';
    s.on('data', (d: Buffer) => (answer += d.toString()));
    s.write(head + body);
    const t0 = Date.now();
    const closed = new Promise<void>((r) => s.on('close', () => r()));
    if (holdMs === undefined) s.end();
    await closed;
    return { answer, ms: Date.now() - t0 };
  };

  it('answers 504 Timeout for a body that stops arriving, and closes the connection', { timeout: 10_000 }, async () => {
    const { answer, ms } = await exchange(
      'POST /x HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n',
      '{"a":',
      Infinity,
    );
    assert.match(answer, /^HTTP\/1\.1 504 /);
    assert.match(answer, /"reason":"Timeout"/);
    assert.match(answer, /did not arrive within 0\.3 s/);
    assert.ok(ms < 5_000, `closed after ${ms} ms`);
  });

  it('reads a body that arrives in time', async () => {
    const body = '{"a":1}';
    const { answer } = await exchange(
      `POST /x HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n`,
      body,
    );
    assert.match(answer, /^HTTP\/1\.1 200 /);
    assert.match(answer, /\{"got":\{"a":1\}\}$/);
  });
});
