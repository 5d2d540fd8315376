/**
 * The router of a deployment with `--e2b-domain` and `--e2b-sandbox-tls-*-file`: it answers HTTPS with the
 * `*.<domain>` wildcard certificate for the hosts the SDK builds (`https://<port>-<id>.<domain>`), routing by the
 * host; and a signed `/files` URL that names no sandbox and matches no sandbox's token is a 400, sent nowhere. The
 * name is resolved to the router by the request itself (connect to 127.0.0.1, SNI and Host the SDK's name), so no
 * /etc/hosts entry is needed. (The whole path with a real sandbox: test/aggregated/e2b-sdk-versions.test.ts.)
 */
import assert from 'node:assert/strict';
import { request } from 'node:https';
import { after, before, describe, it } from 'node:test';
import { SandboxRouter } from '../../src/apiserver/e2b/router.js';
import { EventLog } from '../../src/apiserver/sandboxes/event-log.js';
import { SandboxdClient } from '../../src/apiserver/sandboxes/sandboxd-client.js';
import { SandboxStore } from '../../src/apiserver/sandboxes/store.js';
import { silentLogger } from '../../src/log/logger.js';
import { createCertificateAuthority, issueCertificate } from '../../src/pki/index.js';

const DOMAIN = 'e2b.test';

function get(port: number, ca: string, host: string, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const r = request(
      { host: '127.0.0.1', port, path, servername: host, headers: { host }, ca, rejectUnauthorized: true },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      },
    );
    r.on('error', reject);
    r.end();
  });
}

describe('e2b router over TLS (--e2b-domain)', () => {
  const ca = createCertificateAuthority({ commonName: 'e2b test CA' }, { validityMs: 3_600_000 });
  const leaf = issueCertificate(ca, {
    subject: { commonName: `*.${DOMAIN}` },
    usages: ['server'],
    subjectAltNames: [`*.${DOMAIN}`],
    validityMs: 3_600_000,
  });
  const client = new SandboxdClient({ token: 'unused' });
  const router = new SandboxRouter({
    store: new SandboxStore(silentLogger, new EventLog(16)),
    client,
    namespace: 'e2b',
    logger: silentLogger,
    tls: { cert: leaf.certPem, key: leaf.keyPem },
  });
  let port = 0;
  before(async () => {
    port = (await router.listen('127.0.0.1', 0)).port;
  });
  after(async () => {
    await router.close();
    client.close();
  });

  it('serves the wildcard name over HTTPS and routes by host: an unknown sandbox is 502 "… was not found"', async () => {
    const r = await get(port, ca.certPem, `49983-iabc.${DOMAIN}`, '/health');
    assert.equal(r.status, 502);
    assert.match(r.body, /The sandbox iabc was not found/);
    const port3000 = await get(port, ca.certPem, `3000-iabc.${DOMAIN}`, '/');
    assert.equal(port3000.status, 502);
    // The certificate is checked: another name is refused by the client.
    await assert.rejects(get(port, ca.certPem, 'other.example', '/'), /altnames|does not match/i);
  });

  it('a signed /files URL without a sandbox id that no sandbox signed is 400, sent nowhere', async () => {
    const r = await get(port, ca.certPem, `sandbox.${DOMAIN}`, '/files?path=%2Ftmp%2Fa&signature=v1_forged');
    assert.equal(r.status, 400);
    assert.match(r.body, /name the sandbox/);
  });
});
