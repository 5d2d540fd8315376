import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { verifyClientChain } from '../../src/apiserver/auth/x509-chain.js';
import { issueCert, type CertPair } from '../../src/cluster/index.js';
import { issueCertificate } from '../../src/pki/index.js';
import { clientCert, rogueCa } from './auth-support.js';

describe('verifyClientChain (certificates made by src/pki)', () => {
  let dir: string;
  let root: X509Certificate;
  let other: X509Certificate;
  let intermediate: X509Certificate;
  let leaf: X509Certificate;
  let direct: X509Certificate;
  let serverOnly: X509Certificate;
  let underLeaf: X509Certificate;
  const x509 = (p: CertPair) => new X509Certificate(readFileSync(p.cert));

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sbx-chain-'));
    const rootPair = await rogueCa(dir, 'chain-root');
    const interPair = await rogueCa(dir, 'chain-intermediate', rootPair);
    const leafPair = await clientCert(dir, interPair, 'chain-leaf', 'leaf-user');
    const directPair = await clientCert(dir, rootPair, 'chain-direct', 'direct-user');
    root = x509(rootPair);
    other = x509(await rogueCa(dir, 'chain-other'));
    intermediate = x509(interPair);
    leaf = x509(leafPair);
    direct = x509(directPair);
    serverOnly = x509(await issueCert(dir, rootPair, { name: 'chain-server', commonName: 's', usage: 'server' }));
    // Signed by a leaf (no CA would): the chain a verifier must refuse.
    const sneaky = issueCertificate(
      { certPem: readFileSync(directPair.cert, 'utf8'), keyPem: readFileSync(directPair.key, 'utf8') },
      { subject: { commonName: 'sneaky' }, usages: ['client'], validityMs: 3_600_000, issuerMayBeLeaf: true },
    );
    underLeaf = new X509Certificate(sneaky.certPem);
  });
  after(() => rm(dir, { recursive: true, force: true }));

  it('accepts a leaf signed by a root, and one through a presented intermediate', () => {
    const d = verifyClientChain([direct], [other, root]);
    assert.ok(d.ok && d.chain.length === 2 && d.chain[1] === root);
    const v = verifyClientChain([leaf, intermediate], [root]);
    assert.ok(v.ok && v.chain.length === 3);
    assert.equal(v.recheckAt, Math.min(...[leaf, intermediate, root].map((c) => Date.parse(c.validTo))));
  });

  it('refuses a missing intermediate, a foreign root, a non-CA issuer, and a certificate not for clients', () => {
    const reason = (v: ReturnType<typeof verifyClientChain>) => (v.ok ? 'ok' : v.reason);
    assert.match(reason(verifyClientChain([leaf], [root])), /not signed by a trusted CA/);
    assert.match(reason(verifyClientChain([leaf, intermediate], [other])), /not signed by a trusted CA/);
    assert.match(reason(verifyClientChain([underLeaf, direct], [root])), /not signed by a trusted CA/);
    assert.match(reason(verifyClientChain([serverOnly], [root])), /not for client authentication/);
    assert.match(reason(verifyClientChain([], [root])), /no client certificate/);
  });

  it('checks every certificate against the clock', () => {
    const reason = (now: number) => {
      const v = verifyClientChain([leaf, intermediate], [root], now);
      return v.ok ? 'ok' : v.reason;
    };
    assert.match(reason(Date.parse(leaf.validTo) + 1000), /expired/);
    assert.match(reason(Date.parse(leaf.validFrom) - 120_000), /not valid before/);
    // src/pki never issues a certificate that outlives its issuer, so the leaf goes with the intermediate; past
    // that instant the chain is refused as expired.
    assert.match(reason(Date.parse(intermediate.validTo) + 1000), /expired/);
  });
});
