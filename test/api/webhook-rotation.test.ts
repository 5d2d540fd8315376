/**
 * Serving-certificate rotation of the conversion webhook without a cluster, with certificates that live seconds:
 * the self-managed certificate is renewed before it expires (Secret, cert dir and CRD caBundle follow), and
 * certificates provided in the cert dir (cert-manager, mounted the way the kubelet projects a Secret) are
 * reloaded when they change. Both without restarting the server: a request in flight across the swap and a
 * kept-alive connection finish on the old certificate while new connections get the new one.
 */
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rename, rm, symlink, writeFile } from 'node:fs/promises';
import type { ClientRequest } from 'node:http';
import { Agent, request, type Agent as HttpsAgent } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { connect, type TLSSocket } from 'node:tls';
import { silentLogger } from '../../src/log/logger.js';
import { generateBundle, startWebhook, type CertificateBundle } from '../../src/operator/webhook/index.js';
import { MemoryStore } from './memory-cert-store.js';

const HOST = '127.0.0.1';
const CRD = 'sandboxes.agents.x-k8s.io';
const identity = { serviceName: 'svc', namespace: 'ns', clusterDomain: 'cluster.local' };
const review = JSON.stringify({
  apiVersion: 'apiextensions.k8s.io/v1',
  kind: 'ConversionReview',
  request: { uid: 'u-1', desiredAPIVersion: 'agents.x-k8s.io/v1alpha1', objects: [] },
});

/** The certificate a new TLS connection is served, verified against `ca`. */
function served(port: number, ca: string): Promise<X509Certificate> {
  return new Promise((resolve, reject) => {
    const s = connect({ host: HOST, port, ca }, () => {
      const cert = s.getPeerX509Certificate();
      s.end();
      if (cert) resolve(cert);
      else reject(new Error('no peer certificate'));
    });
    s.on('error', reject);
  });
}

async function until<T>(what: string, f: () => Promise<T | undefined>, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await f().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(100);
  }
}

/**
 * A POST /convert on `agent` whose body is only half sent until `finish()`: the connection and the request are
 * open across whatever happens in between.
 */
function inFlight(port: number, ca: string, agent: HttpsAgent) {
  const half = Math.floor(review.length / 2);
  let socket: TLSSocket | undefined;
  let req!: ClientRequest;
  const response = new Promise<{ status: number; body: string }>((resolve, reject) => {
    req = request(
      {
        host: HOST,
        port,
        path: '/convert',
        method: 'POST',
        ca,
        agent,
        headers: { 'content-type': 'application/json', 'content-length': review.length },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString() }));
      },
    );
    req.on('socket', (s) => (socket = s as TLSSocket));
    req.on('error', reject);
  });
  req.write(review.slice(0, half));
  return { response, socket: () => socket, finish: () => req.end(review.slice(half)) };
}

function get(port: number, ca: string, agent: HttpsAgent, path = '/healthz') {
  return new Promise<{ status: number; body: string; socket: TLSSocket | undefined }>((resolve, reject) => {
    let socket: TLSSocket | undefined;
    const req = request({ host: HOST, port, path, ca, agent }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString(), socket }));
    });
    req.on('socket', (s) => (socket = s as TLSSocket));
    req.on('error', reject);
    req.end();
  });
}

const pemsOf = (bundle: string): string[] =>
  (bundle.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----\n?/g) ?? []).map((p) =>
    p.endsWith('\n') ? p : `${p}\n`,
  );

function lastCaBundle(store: MemoryStore): string {
  const patch = store.patches.at(-1)?.[1] as
    { spec: { conversion: { webhook: { clientConfig: { caBundle: string } } } } } | undefined;
  return Buffer.from(patch?.spec.conversion.webhook.clientConfig.caBundle ?? '', 'base64').toString();
}

describe('conversion webhook certificate rotation', () => {
  const dirs: string[] = [];
  after(async () => {
    for (const d of dirs) await rm(d, { recursive: true, force: true });
  });

  it('renews the self-managed certificate before it expires, without dropping the server', async () => {
    const certDir = await mkdtemp(join(tmpdir(), 'sbx-webhook-rotation-'));
    dirs.push(certDir);
    const store = new MemoryStore();
    store.crds.set(CRD, { strategy: 'Webhook', conversionReviewVersions: ['v1'] });
    const hook = await startWebhook({
      port: 0,
      host: HOST,
      certDir,
      manageCerts: true,
      ...identity,
      webhookUrl: (port) => `https://${HOST}:${port}/convert`,
      extensions: false,
      store,
      logger: silentLogger,
      // Valid 10 s, renewed when 6 s remain: the first renewal comes 3-4 s after start, the next 4 s later.
      certValidityMs: 10_000,
      renewBeforeMs: 6_000,
    });
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const port = hook.port;
      const firstCa = hook.caPem!;
      assert.deepEqual(pemsOf(lastCaBundle(store)), [firstCa]);
      const first = await served(port, firstCa);
      const pending = inFlight(port, firstCa, agent);
      pending.response.catch(() => undefined); // awaited below; this only keeps an early failure's reset quiet

      // Renewal: a new CA published next to the old one, then new connections get a certificate of the new CA.
      const renewedCa = await until(
        'a renewed CA',
        async () => (hook.caPem !== firstCa ? hook.caPem : undefined),
        8_000,
      );
      assert.deepEqual(pemsOf(lastCaBundle(store)), [renewedCa, firstCa], 'the CRD trusts both CAs during the switch');
      const second = await until(
        'a certificate of the renewed CA on new connections',
        async () => {
          const c = await served(port, renewedCa);
          return c.fingerprint256 !== first.fingerprint256 ? c : undefined;
        },
        8_000,
      );
      assert.ok(second.verify(new X509Certificate(renewedCa).publicKey));
      assert.ok(Date.parse(second.validTo) > Date.parse(first.validTo));
      assert.equal(hook.port, port, 'the same server');
      const secret = store.secrets.get('ns/sandbox-webhook-certs')!.data;
      assert.equal(secret['ca.crt'], renewedCa);
      assert.equal(secret['tls.crt'], await readFile(join(certDir, 'tls.crt'), 'utf8'));
      assert.equal(new X509Certificate(secret['tls.crt']!).fingerprint256, second.fingerprint256);

      // The request that was in flight across the renewal completes on its old connection, and that kept-alive
      // connection serves another request.
      const oldSocket = pending.socket()!;
      assert.equal(oldSocket.getPeerX509Certificate()?.fingerprint256, first.fingerprint256);
      pending.finish();
      const done = await pending.response;
      assert.equal(done.status, 200);
      assert.equal(
        (JSON.parse(done.body) as { response: { result: { status: string } } }).response.result.status,
        'Success',
      );
      const again = await get(port, firstCa, agent);
      assert.equal(again.status, 200);
      assert.equal(again.socket, oldSocket, 'the kept-alive connection was reused, not dropped');
    } finally {
      agent.destroy();
      await hook.close();
    }
  });

  /** Writes `files` the way the kubelet projects a Secret volume: a new timestamped dir, then `..data` swapped. */
  async function project(dir: string, version: number, files: Record<string, string>): Promise<void> {
    const versionDir = `..v${version}`;
    await mkdir(join(dir, versionDir));
    for (const [name, content] of Object.entries(files)) await writeFile(join(dir, versionDir, name), content);
    await symlink(versionDir, join(dir, '..data_tmp'));
    await rename(join(dir, '..data_tmp'), join(dir, '..data'));
    for (const name of Object.keys(files))
      await symlink(join('..data', name), join(dir, name)).catch((err: NodeJS.ErrnoException) => {
        if (err.code !== 'EEXIST') throw err;
      });
    if (version > 1) await rm(join(dir, `..v${version - 1}`), { recursive: true });
  }
  const tlsFiles = (b: Pick<CertificateBundle, 'certPem' | 'keyPem'>) => ({
    'tls.crt': b.certPem,
    'tls.key': b.keyPem,
  });

  it('reloads certificates provided in the cert dir when they change, and ignores a mismatched pair', async () => {
    const certDir = await mkdtemp(join(tmpdir(), 'sbx-webhook-certdir-'));
    dirs.push(certDir);
    const [a, b] = [0, 1].map(() => generateBundle({ ...identity, extraSans: [HOST] }));
    await project(certDir, 1, tlsFiles(a!));
    const hook = await startWebhook({
      port: 0,
      host: HOST,
      certDir,
      manageCerts: false,
      ...identity,
      extensions: false,
      logger: silentLogger,
    });
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const port = hook.port;
      const first = await served(port, a!.caPem);
      const pending = inFlight(port, a!.caPem, agent);
      pending.response.catch(() => undefined); // awaited below; this only keeps an early failure's reset quiet

      // Half an update (B's certificate with A's key) is not served; the server keeps A and stays up.
      await project(certDir, 2, tlsFiles({ certPem: b!.certPem, keyPem: a!.keyPem }));
      await sleep(1_500);
      assert.equal((await served(port, a!.caPem)).fingerprint256, first.fingerprint256);

      await project(certDir, 3, tlsFiles(b!));
      const next = await until('the new certificate on new connections', () => served(port, b!.caPem), 5_000);
      assert.equal(next.fingerprint256, new X509Certificate(b!.certPem).fingerprint256);
      assert.equal(hook.port, port, 'the same server');

      const oldSocket = pending.socket()!;
      assert.equal(oldSocket.getPeerX509Certificate()?.fingerprint256, first.fingerprint256);
      pending.finish();
      assert.equal((await pending.response).status, 200);
      const again = await get(port, a!.caPem, agent);
      assert.equal(again.status, 200);
      assert.equal(again.socket, oldSocket, 'the kept-alive connection was reused, not dropped');
    } finally {
      agent.destroy();
      await hook.close();
    }
  });
});
