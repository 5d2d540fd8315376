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

/**
 * A body declared too large (Content-Length past the cap, up to 8 x) is drained before its 413: a proxy in front
 * (kube-aggregator) writes the whole body before it reads the answer, and an answer sent (and the connection
 * closed) mid-body fails its write with EPIPE, which it turns into a 503 for the client.
 */
describe('a declared-too-large body', () => {
  const server = createServer((req, res) => {
    readJsonBody(req, 1 << 20, 10_000).then(
      (body) => sendJson(res, 200, { got: body }),
      (err: unknown) => sendStatus(res, toStatusFailure(err)),
    );
  });
  after(() => {
    server.closeAllConnections();
    return new Promise((r) => server.close(r));
  });

  it('is answered 413 only once the client has written all of it', { timeout: 10_000 }, async () => {
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const s = connect((server.address() as AddressInfo).port, '127.0.0.1');
    let answer = '';
    s.on('data', (d: Buffer) => (answer += d.toString()));
    const writeFailed = new Promise<Error | undefined>((r) => {
      s.on('error', (err) => r(err));
      s.on('close', () => r(undefined));
    });
    const length = 1.5 * (1 << 20);
    s.write(
      `POST /x HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${length}\r\nConnection: close\r\n\r\n`,
    );
    s.write(Buffer.alloc(length / 2, 0x20));
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(answer, '', 'no answer while the body is still arriving');
    s.end(Buffer.alloc(length / 2, 0x20));
    assert.equal(await writeFailed, undefined, 'the whole body was written without an error');
    assert.match(answer, /^HTTP\/1\.1 413 /);
  });
});
