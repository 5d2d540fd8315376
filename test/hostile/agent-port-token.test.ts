/**
 * Who may reach a sandbox's ports through envd (issue 28 item 7): claim ids are published (NodeInventory), so an id
 * alone must open nothing. Only a sandbox created through the e2b API with public traffic (e2b's default) serves its
 * ports without a token; every other one needs its envd access token or its traffic access token, on plain requests
 * and upgrades alike.
 */
import assert from 'node:assert/strict';
import { connect, type Server } from 'node:net';
import { createServer as createHttpServer } from 'node:http';
import { after, before, describe, it } from 'node:test';
import * as envdApi from '../../src/api/envd.js';
import * as keys from '../../src/api/keys.js';
import { sandboxView } from '../../src/apiserver/e2b/views.js';
import type { EnvdServer } from '../../src/sandboxd/envd/server.js';
import { call, startEnvd, tcpAgent } from './agent-envd-support.js';

describe("a sandbox's ports behind envd need its token unless it opted in", () => {
  let guestHttp: Server;
  let guestPort: number;
  let envd: EnvdServer;
  let port: number;
  const privateRec = { id: 'sbx-private', token: 'tok-private', hibernated: false, object: { metadata: {} } };
  const publicRec = {
    id: 'sbx-public',
    token: 'tok-public',
    hibernated: false,
    object: { metadata: { annotations: { [keys.E2B_PUBLIC_TRAFFIC_ANNOTATION]: 'true' } } },
  };

  before(async () => {
    guestHttp = createHttpServer((_req, res) => res.end('guest secret'));
    guestHttp.on('upgrade', (_req, socket) => socket.end('HTTP/1.1 101 Switching Protocols\r\n\r\nupgraded'));
    await new Promise<void>((r) => guestHttp.listen(0, '127.0.0.1', r));
    guestPort = (guestHttp.address() as { port: number }).port;
    ({ envd, port } = await startEnvd([privateRec, publicRec], tcpAgent));
  });

  after(async () => {
    await envd.close();
    await new Promise((r) => guestHttp.close(r));
  });

  const to = (id: string, extra: Record<string, string> = {}) => ({
    'e2b-sandbox-id': id,
    'e2b-sandbox-port': String(guestPort),
    ...extra,
  });

  it("a claim id alone is refused with 401 and e2b's {code, message}", async () => {
    const a = await call(port, '/', to(privateRec.id));
    assert.ok(!(a instanceof Error), String(a));
    assert.equal(a.status, 401, `answered ${a.status}: ${a.body}`);
    assert.equal((JSON.parse(a.body) as { code: number }).code, 401);
    assert.doesNotMatch(a.body, /guest secret/);
    const wrong = await call(port, '/', to(privateRec.id, { 'x-access-token': 'guess' }));
    assert.ok(!(wrong instanceof Error) && wrong.status === 401);
  });

  it('the envd access token or the traffic access token opens the port', async () => {
    const envdToken = envdApi.envdAccessToken(privateRec.token);
    const withEnvd = await call(port, '/', to(privateRec.id, { 'x-access-token': envdToken }));
    assert.ok(!(withEnvd instanceof Error) && withEnvd.body === 'guest secret', String(withEnvd));
    const traffic = envdApi.trafficAccessToken(envdToken);
    assert.notEqual(traffic, envdToken, 'the traffic token is not the envd token');
    const withTraffic = await call(port, '/', to(privateRec.id, { 'e2b-traffic-access-token': traffic }));
    assert.ok(!(withTraffic instanceof Error) && withTraffic.body === 'guest secret', String(withTraffic));
    const envdAsTraffic = await call(port, '/', to(privateRec.id, { 'e2b-traffic-access-token': envdToken }));
    assert.ok(!(envdAsTraffic instanceof Error) && envdAsTraffic.status === 401);
  });

  it('a sandbox created through the e2b API with public traffic serves its ports without a token', async () => {
    const a = await call(port, '/', to(publicRec.id));
    assert.ok(!(a instanceof Error) && a.status === 200 && a.body === 'guest secret', String(a));
  });

  it("the e2b API's create answer carries the traffic token exactly when the ports are not public", () => {
    const entry = (annotations: Record<string, string>) =>
      ({ name: 'i1', node: 'n', pool: { template: 'base' }, object: { metadata: { annotations } } }) as never;
    const envdToken = envdApi.envdAccessToken('tok');
    assert.equal(
      sandboxView(entry({ [keys.E2B_PUBLIC_TRAFFIC_ANNOTATION]: 'true' }), envdToken, undefined).trafficAccessToken,
      null,
    );
    assert.equal(
      sandboxView(entry({}), envdToken, undefined).trafficAccessToken,
      envdApi.trafficAccessToken(envdToken),
    );
    assert.ok(
      keys.isServerWrittenSandboxKey('annotations', keys.E2B_PUBLIC_TRAFFIC_ANNOTATION),
      'kubectl cannot set it',
    );
  });

  it('an upgrade without the token is refused before the guest is dialled', async () => {
    const answer = await new Promise<string>((resolve) => {
      const s = connect(port, '127.0.0.1');
      let got = '';
      s.on('data', (b: Buffer) => (got += b.toString()));
      s.on('close', () => resolve(got));
      s.on('error', () => resolve(got));
      s.write(
        `GET / HTTP/1.1\r\nhost: x\r\ne2b-sandbox-id: ${privateRec.id}\r\ne2b-sandbox-port: ${guestPort}\r\n` +
          'connection: upgrade\r\nupgrade: websocket\r\n\r\n',
      );
    });
    assert.match(answer, /^HTTP\/1\.1 401/);
    assert.doesNotMatch(answer, /upgraded/);
  });
});
