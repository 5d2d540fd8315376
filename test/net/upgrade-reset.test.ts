/**
 * The e2b planes' upgrade listeners (the sandbox router in src/apiserver/e2b/router.ts, envd's in
 * src/sandboxd/envd/server.ts) survive clients that reset an upgrade connection they are answering. Node removes the
 * server's error listener from an upgraded socket; before each listener added its own, the ECONNRESET of such a
 * client was an uncaught exception, and it ended the process (sandbox-apiserver, or sandboxd). No sandbox is needed:
 * both answer an unknown sandbox themselves.
 */
import assert from 'node:assert/strict';
import { request, type Server } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { after, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { SandboxRouter } from '../../src/apiserver/e2b/router.js';
import { EventLog } from '../../src/apiserver/sandboxes/event-log.js';
import type { SandboxdClient } from '../../src/apiserver/sandboxes/sandboxd-client.js';
import { SandboxStore } from '../../src/apiserver/sandboxes/store.js';
import { silentLogger } from '../../src/log/logger.js';
import { EnvdServer, type EnvdServerOptions } from '../../src/sandboxd/envd/server.js';
import { NO_IDLE } from '../support/engine-stubs.js';

/** 50 upgrade requests for an unknown sandbox, reset by the client before or on the answer; then one plain request. */
async function hammer(port: number): Promise<{ uncaught: unknown[]; status: number }> {
  const uncaught: unknown[] = [];
  const onUncaught = (err: unknown) => uncaught.push(err);
  process.on('uncaughtException', onUncaught);
  try {
    for (let i = 0; i < 50; i++) {
      const s = connect(port, '127.0.0.1');
      s.on('error', () => undefined);
      await new Promise((r) => s.once('connect', r));
      s.write(
        `GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nE2b-Sandbox-Id: nope-${i}\r\nE2b-Sandbox-Port: 8080\r\n\r\n`,
      );
      if (i % 2) s.resetAndDestroy();
      else s.once('data', () => s.resetAndDestroy());
    }
    await sleep(500);
    const status = await new Promise<number>((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port, path: '/', headers: { 'e2b-sandbox-id': 'nope' } }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on('error', reject);
      req.end();
    });
    return { uncaught, status };
  } finally {
    process.off('uncaughtException', onUncaught);
  }
}

describe('upgrade connections reset by the client', () => {
  const closers: Array<() => Promise<void>> = [];
  after(async () => {
    for (const c of closers) await c();
  });
  const listen = async (server: Server) =>
    (await new Promise<AddressInfo>((r) => server.listen(0, '127.0.0.1', () => r(server.address() as AddressInfo))))
      .port;

  it('the e2b router neither crashes nor stops answering', async () => {
    const router = new SandboxRouter({
      store: new SandboxStore(silentLogger, new EventLog(8)),
      client: {} as SandboxdClient,
      namespace: 'ns',
      logger: silentLogger,
    });
    closers.push(() => router.close());
    const r = await hammer(await listen(router.server));
    assert.deepEqual(r.uncaught, [], 'no uncaught exception');
    assert.equal(r.status, 502, 'an unknown sandbox is 502');
  });

  it("envd's listener neither crashes nor stops answering", async () => {
    const engine = { on: () => undefined, get: () => undefined, idle: NO_IDLE };
    const envd = new EnvdServer({ engine } as unknown as EnvdServerOptions);
    closers.push(() => envd.close());
    const r = await hammer(await listen(envd.server));
    assert.deepEqual(r.uncaught, [], 'no uncaught exception');
    assert.equal(r.status, 502, 'an unknown sandbox is 502');
  });
});
