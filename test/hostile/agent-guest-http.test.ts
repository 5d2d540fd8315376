/**
 * A hostile HTTP server standing in for a guest's port behind envd's port forwarding (envd/guest-ports.ts): statuses
 * out of range, invalid headers, 101 without an upgrade, bodies cut short, garbage, silence. Each answer is a 502
 * with e2b's {code, message} (or a connection cut off once the head was sent), nothing escapes (an exception in the
 * 'response' listener ended sandboxd), and the next good answer goes through.
 */
import assert from 'node:assert/strict';
import { createServer, type Server, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import * as keys from '../../src/api/keys.js';
import type { EnvdServer } from '../../src/sandboxd/envd/server.js';
import { crashesDuring, LONG, SEED } from './agent-fake-guest.js';
import { call, startEnvd, tcpAgent } from './agent-envd-support.js';

/** Raw answers of the guest's port; each is written as is and the connection ended. */
const ANSWERS: Array<[string, string | Buffer]> = [
  ['status 099', 'HTTP/1.1 099 Low\r\ncontent-length: 0\r\n\r\n'],
  ['status 000', 'HTTP/1.1 000 Zero\r\ncontent-length: 0\r\n\r\n'],
  ['status 600', 'HTTP/1.1 600 High\r\ncontent-length: 0\r\n\r\n'],
  ['status 999', 'HTTP/1.1 999 High\r\ncontent-length: 0\r\n\r\n'],
  ['status 1000', 'HTTP/1.1 1000 X\r\ncontent-length: 0\r\n\r\n'],
  ['status 101 without an upgrade', 'HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\nconnection: upgrade\r\n\r\n'],
  ['a DEL in a header value', 'HTTP/1.1 200 OK\r\nx-bad: a\x7fb\r\ncontent-length: 0\r\n\r\n'],
  ['a header name with a space', 'HTTP/1.1 200 OK\r\nx bad: 1\r\ncontent-length: 0\r\n\r\n'],
  ['two content-lengths', 'HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nab'],
  ['a body cut short', 'HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc'],
  ['a broken chunk', 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nab\r\n'],
  ['garbage', Buffer.from([0, 1, 2, 3, 0xff, 0x0d, 0x0a, 0x0d, 0x0a])],
  ['nothing at all', ''],
  ['a 64 KiB header', `HTTP/1.1 200 OK\r\nx-big: ${'a'.repeat(64 << 10)}\r\ncontent-length: 0\r\n\r\n`],
  ['an HTTP/0.9 answer', 'hello\n'],
];

describe('hostile guest: HTTP answers of a guest port behind envd', () => {
  let envd: EnvdServer;
  let port: number;
  let guestServer: Server;
  let guestPort: number;
  /** What the guest's port answers next (written raw, then the connection ended). */
  let next: string | Buffer = '';
  const rec = {
    id: 'sbx-ports',
    token: 'tok-ports',
    hibernated: false,
    // ports open without a token (e2b's public traffic), so what is tested is the answer
    object: { metadata: { annotations: { [keys.E2B_PUBLIC_TRAFFIC_ANNOTATION]: 'true' } } },
  };

  before(async () => {
    guestServer = createServer((s: Socket) => {
      s.on('error', () => undefined);
      s.once('data', () => s.end(next));
    });
    await new Promise<void>((r) => guestServer.listen(0, '127.0.0.1', r));
    guestPort = (guestServer.address() as { port: number }).port;
    ({ envd, port } = await startEnvd(rec, tcpAgent));
  });

  after(async () => {
    await envd.close();
    await new Promise((r) => guestServer.close(r));
  });

  const headers = () => ({ 'e2b-sandbox-id': rec.id, 'e2b-sandbox-port': String(guestPort) });

  async function assertStillServes(): Promise<void> {
    next = 'HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 4\r\n\r\nfine';
    const good = await call(port, '/', headers());
    assert.ok(!(good instanceof Error), String(good));
    assert.deepEqual([good.status, good.body], [200, 'fine']);
  }

  for (const [what, raw] of ANSWERS) {
    it(`${what}: a 502 or a cut connection, never a crash`, async () => {
      next = raw;
      let answer: Awaited<ReturnType<typeof call>> | undefined;
      const crashes = await crashesDuring(async () => {
        answer = await call(port, '/', headers());
      });
      assert.deepEqual(crashes, []);
      assert.ok(!(answer instanceof Error && /did not answer/.test(answer.message)), 'envd left the request hanging');
      if (!(answer instanceof Error)) {
        assert.equal(answer!.status, 502, `answered ${answer!.status} ${answer!.body.slice(0, 200)}`);
        const body = JSON.parse(answer!.body) as { code: number; message: string };
        assert.equal(body.code, 502);
        assert.equal(typeof body.message, 'string');
      }
      await assertStillServes();
    });
  }

  it('random status lines and header bytes (seeded): nothing escapes, envd goes on', async () => {
    let seed = SEED;
    const rnd = (n: number) => {
      seed = (seed * 1_103_515_245 + 12_345) & 0x7fff_ffff;
      return seed % n;
    };
    for (let i = 0; i < (LONG ? 2000 : 60); i++) {
      const status = rnd(2) ? String(rnd(1200)).padStart(3, '0') : String(rnd(1000));
      const name = Buffer.from(Array.from({ length: 1 + rnd(8) }, () => 0x21 + rnd(94))).toString('latin1');
      const value = Buffer.from(Array.from({ length: rnd(16) }, () => rnd(256))).toString('latin1');
      next = Buffer.from(`HTTP/1.1 ${status} R\r\n${name}: ${value}\r\ncontent-length: 0\r\n\r\n`, 'latin1');
      const crashes = await crashesDuring(async () => {
        const a = await call(port, '/', headers());
        if (!(a instanceof Error)) assert.ok(a.status >= 200 && a.status <= 599, `status ${a.status}`);
      }, 0);
      assert.deepEqual(crashes, [], `answer ${JSON.stringify(next.toString('latin1'))}`);
    }
    await assertStillServes();
  });
});
