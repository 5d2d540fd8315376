/**
 * src/pki without a cluster: the fields of what it issues, read back by node's X.509 parser, and the usages
 * enforced by a real TLS handshake (OpenSSL inside node checks serverAuth for servers and clientAuth for
 * clients). Go's crypto/x509 checks the same certificates on every cluster start (test/cluster).
 */
import assert from 'node:assert/strict';
import { createPrivateKey, X509Certificate } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { connect, createServer } from 'node:tls';
import { describe, it } from 'node:test';
import { SandboxError } from '../../src/errors.js';
import {
  createCertificateAuthority,
  issueCertificate,
  keyMatches,
  type PemPair,
  type Usage,
} from '../../src/pki/index.js';

const DAY = 86_400_000;
const ca = createCertificateAuthority({ commonName: 'test-ca' }, { validityMs: 10 * DAY });

describe('src/pki', () => {
  it('makes a self-signed CA with a P-256 key', () => {
    const cert = new X509Certificate(ca.certPem);
    assert.ok(cert.ca);
    assert.equal(cert.subject, 'CN=test-ca');
    assert.equal(cert.issuer, 'CN=test-ca');
    assert.ok(cert.verify(cert.publicKey));
    assert.ok(cert.checkIssued(cert));
    assert.equal(cert.publicKey.asymmetricKeyDetails?.namedCurve, 'prime256v1');
    assert.ok(keyMatches(ca));
    assert.match(ca.keyPem, /^-----BEGIN PRIVATE KEY-----\n/);
  });

  it('issues a leaf with O and CN, both EKUs, DNS and IP SANs (v4, v6, v4-mapped)', () => {
    const leaf = issueCertificate(ca, {
      subject: { commonName: 'sbx-admin', organizations: ['system:masters', 'team-a'] },
      usages: ['server', 'client'],
      subjectAltNames: ['kubernetes.default.svc', '10.213.0.1', 'fd00::1', '::ffff:192.0.2.1'],
      validityMs: DAY,
    });
    const cert = new X509Certificate(leaf.certPem);
    assert.equal(cert.subject, 'O=system:masters\nO=team-a\nCN=sbx-admin');
    assert.equal(cert.issuer, 'CN=test-ca');
    assert.ok(!cert.ca);
    assert.ok(cert.checkIssued(new X509Certificate(ca.certPem)));
    assert.ok(cert.verify(new X509Certificate(ca.certPem).publicKey));
    assert.deepEqual(cert.keyUsage?.sort(), ['1.3.6.1.5.5.7.3.1', '1.3.6.1.5.5.7.3.2']);
    assert.equal(
      cert.subjectAltName,
      'DNS:kubernetes.default.svc, IP Address:10.213.0.1, IP Address:FD00:0:0:0:0:0:0:1, IP Address:0:0:0:0:0:FFFF:C000:201',
    );
    assert.equal(cert.checkIP('10.213.0.1'), '10.213.0.1');
    assert.equal(cert.checkHost('kubernetes.default.svc'), 'kubernetes.default.svc');
    assert.ok(keyMatches(leaf));
    assert.equal(createPrivateKey(leaf.keyPem).asymmetricKeyType, 'ec');
    assert.ok(!keyMatches({ certPem: leaf.certPem, keyPem: ca.keyPem }));
    const hours = (Date.parse(cert.validTo) - Date.now()) / 3_600_000;
    assert.ok(hours > 23.9 && hours <= 24, `valid for ${hours} h`);
    // Backdated a little for peers whose clocks lag.
    assert.ok(Date.parse(cert.validFrom) < Date.now() - 60_000);
  });

  it('never issues past the CA, and refuses what no verifier would accept', () => {
    const long = issueCertificate(ca, { subject: { commonName: 'x' }, usages: ['server'], validityMs: 100 * DAY });
    assert.equal(new X509Certificate(long.certPem).validTo, new X509Certificate(ca.certPem).validTo);
    const leaf = issueCertificate(ca, { subject: { commonName: 'leaf' }, usages: ['server'], validityMs: DAY });
    const bad: [string, () => unknown, RegExp][] = [
      [
        'a leaf as CA',
        () => issueCertificate(leaf, { subject: { commonName: 'y' }, usages: ['client'], validityMs: DAY }),
        /not a CA/,
      ],
      [
        'a mismatched CA key',
        () =>
          issueCertificate(
            { certPem: ca.certPem, keyPem: leaf.keyPem },
            { subject: { commonName: 'y' }, usages: ['client'], validityMs: DAY },
          ),
        /CA key is not the key/,
      ],
      [
        'garbage',
        () =>
          issueCertificate(
            { certPem: 'x', keyPem: 'y' },
            { subject: { commonName: 'y' }, usages: ['client'], validityMs: DAY },
          ),
        /does not parse/,
      ],
      [
        'no usage',
        () => issueCertificate(ca, { subject: { commonName: 'y' }, usages: [], validityMs: DAY }),
        /names no usage/,
      ],
      [
        'no CN',
        () => issueCertificate(ca, { subject: { commonName: '' }, usages: ['server'], validityMs: DAY }),
        /common name/,
      ],
      [
        'a non-ASCII DNS name',
        () =>
          issueCertificate(ca, {
            subject: { commonName: 'y' },
            usages: ['server'],
            subjectAltNames: ['bücher.example'],
            validityMs: DAY,
          }),
        /not a DNS name/,
      ],
      [
        'zero validity',
        () => createCertificateAuthority({ commonName: 'z' }, { validityMs: 0 }),
        /validity must be positive/,
      ],
    ];
    for (const [what, f, message] of bad)
      assert.throws(
        f,
        (err: unknown) =>
          err instanceof SandboxError && err.code === 'pki.invalid-request' && message.test(err.message),
        what,
      );
  });

  /**
   * A mutual-TLS handshake, each side trusting only `ca`: the server answers with its verdict on the client's
   * certificate; the client's verdict on the server's is the connection error.
   */
  async function handshake(server: PemPair, client: PemPair): Promise<string> {
    const srv = createServer(
      { cert: server.certPem, key: server.keyPem, ca: ca.certPem, requestCert: true, rejectUnauthorized: false },
      (s) => s.end(s.authorized ? 'ok' : `server: ${String(s.authorizationError)}`),
    );
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    try {
      return await new Promise((resolve) => {
        const sock = connect({
          host: '127.0.0.1',
          port: (srv.address() as AddressInfo).port,
          ca: ca.certPem,
          cert: client.certPem,
          key: client.keyPem,
          checkServerIdentity: () => undefined,
        });
        sock.on('data', (d: Buffer) => resolve(d.toString()));
        sock.on('error', (err) => resolve(`client: ${err.message}`));
      });
    } finally {
      srv.close();
    }
  }
  const leafFor = (usages: Usage[]) =>
    issueCertificate(ca, { subject: { commonName: usages.join('+') }, usages, validityMs: DAY });

  it('server and client EKUs are what TLS enforces', async () => {
    const server = leafFor(['server']);
    const client = leafFor(['client']);
    assert.equal(await handshake(server, client), 'ok');
    assert.equal(await handshake(leafFor(['server', 'client']), leafFor(['server', 'client'])), 'ok');
    // A server-only certificate cannot authenticate a client, and a client-only one cannot serve.
    assert.equal(await handshake(server, leafFor(['server'])), 'server: INVALID_PURPOSE');
    assert.equal(await handshake(leafFor(['client']), client), 'client: unsuitable certificate purpose');
  });
});
