/**
 * The conversion webhook without a cluster: the ConversionReview handler (good and bad input, batch speed),
 * the HTTPS server, certificate issuance/reuse/renewal and the CRD caBundle patch.
 */
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { request } from 'node:https';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { silentLogger } from '../../src/log/logger.js';
import {
  conversionPatch,
  ensureCertSecret,
  generateBundle,
  handleConversionReview,
  injectCaBundle,
  startConversionWebhookServer,
  startWebhook,
  unfitReason,
} from '../../src/operator/webhook/index.js';
import * as arb from './arbitraries.js';
import { MemoryStore } from './memory-cert-store.js';

const wire = <T>(o: T): T => JSON.parse(JSON.stringify(o)) as T;
const review = (objects: unknown[], desiredAPIVersion: string, apiVersion = 'apiextensions.k8s.io/v1') => ({
  apiVersion,
  kind: 'ConversionReview',
  request: { uid: 'u-1', desiredAPIVersion, objects },
});

describe('handleConversionReview', () => {
  it('converts a batch and echoes uid and review apiVersion (v1 and v1beta1)', () => {
    const objects = wire(fc.sample(arb.sandboxV1beta1, { numRuns: 20, seed: 3 }));
    for (const apiVersion of ['apiextensions.k8s.io/v1', 'apiextensions.k8s.io/v1beta1']) {
      const out = handleConversionReview(review(objects, 'agents.x-k8s.io/v1alpha1', apiVersion));
      assert.equal(out.apiVersion, apiVersion);
      assert.equal(out.response.uid, 'u-1');
      assert.deepEqual(out.response.result, { status: 'Success' });
      assert.equal(out.response.convertedObjects?.length, 20);
      for (const o of out.response.convertedObjects as { apiVersion: string }[])
        assert.equal(o.apiVersion, 'agents.x-k8s.io/v1alpha1');
    }
  });

  const sandbox = (annotations?: Record<string, string>) => ({
    apiVersion: 'agents.x-k8s.io/v1beta1',
    kind: 'Sandbox',
    metadata: { name: 'sb', namespace: 'ns', ...(annotations ? { annotations } : {}) },
    spec: { podTemplate: { spec: { containers: [{ name: 'c', image: 'i' }] } } },
  });
  const bad: [string, unknown, RegExp][] = [
    ['a non-object body', 'hello', /not a JSON object/],
    ['null', null, /not a JSON object/],
    [
      'the wrong kind',
      { apiVersion: 'apiextensions.k8s.io/v1', kind: 'AdmissionReview', request: {} },
      /expected kind ConversionReview/,
    ],
    [
      'an unknown review version',
      { apiVersion: 'apiextensions.k8s.io/v2', kind: 'ConversionReview', request: { uid: 'x' } },
      /unsupported ConversionReview apiVersion/,
    ],
    ['no request', { apiVersion: 'apiextensions.k8s.io/v1', kind: 'ConversionReview' }, /no request/],
    [
      'no uid',
      {
        apiVersion: 'apiextensions.k8s.io/v1',
        kind: 'ConversionReview',
        request: { desiredAPIVersion: 'x/v1', objects: [] },
      },
      /no uid/,
    ],
    ['no desiredAPIVersion', { ...review([], ''), request: { uid: 'u', objects: [] } }, /no desiredAPIVersion/],
    [
      'objects not a list',
      {
        ...review([], 'agents.x-k8s.io/v1alpha1'),
        request: { uid: 'u', desiredAPIVersion: 'agents.x-k8s.io/v1alpha1', objects: {} },
      },
      /no objects list/,
    ],
    ['an object that is a string', review(['x'], 'agents.x-k8s.io/v1alpha1'), /objects\[0\].*not a JSON object/],
    [
      'an object without apiVersion',
      review([{ kind: 'Sandbox', metadata: { name: 'a' }, spec: {} }], 'agents.x-k8s.io/v1alpha1'),
      /Sandbox a.*no apiVersion/,
    ],
    [
      'an unknown kind',
      review(
        [
          {
            apiVersion: 'extensions.agents.x-k8s.io/v1beta1',
            kind: 'NodeInventory',
            metadata: { name: 'n' },
            node: 'n',
          },
        ],
        'extensions.agents.x-k8s.io/v1alpha1',
      ),
      /no conversion for kind NodeInventory/,
    ],
    ['an unknown version', review([sandbox()], 'agents.x-k8s.io/v2'), /unknown version agents.x-k8s.io\/v2/],
    ['another group', review([sandbox()], 'apps/v1'), /another group/],
    [
      'a spec that is not an object',
      review([{ ...sandbox(), spec: 'x' }], 'agents.x-k8s.io/v1alpha1'),
      /Sandbox ns\/sb: spec must be an object/,
    ],
    [
      'an unparsable state annotation',
      review([sandbox({ 'api.agents.x-k8s.io/v1alpha1-sandbox-state': '{oops' })], 'agents.x-k8s.io/v1alpha1'),
      /Sandbox ns\/sb to agents.x-k8s.io\/v1alpha1: invalid api.agents.x-k8s.io\/v1alpha1-sandbox-state annotation/,
    ],
    [
      'a bad VolumeClaimTemplatesPolicy annotation',
      review(
        [
          {
            apiVersion: 'extensions.agents.x-k8s.io/v1alpha1',
            kind: 'SandboxTemplate',
            metadata: {
              name: 't',
              namespace: 'ns',
              annotations: { 'api.agents.x-k8s.io/v1beta1-volume-claim-templates-policy': 'Sometimes' },
            },
            spec: { podTemplate: { spec: { containers: [] } } },
          },
        ],
        'extensions.agents.x-k8s.io/v1beta1',
      ),
      /invalid VolumeClaimTemplatesPolicy annotation value: "Sometimes"/,
    ],
  ];
  for (const [what, body, message] of bad) {
    it(`answers ${what} with a Failure result and a message`, () => {
      const out = handleConversionReview(body);
      assert.equal(out.kind, 'ConversionReview');
      assert.equal(out.response.result.status, 'Failure');
      assert.match(out.response.result.message ?? '', message);
      assert.equal(out.response.convertedObjects, undefined);
    });
  }

  it('answers 1 000 objects in under 100 ms', () => {
    const objects = wire(fc.sample(arb.sandboxV1beta1, { numRuns: 1000, seed: 11 }));
    const body = review(objects, 'agents.x-k8s.io/v1alpha1');
    const times: number[] = [];
    for (let i = 0; i < 7; i++) {
      const t = performance.now();
      const out = handleConversionReview(body);
      times.push(performance.now() - t);
      assert.equal(out.response.result.status, 'Success');
    }
    const best = Math.min(...times);
    process.stderr.write(`ConversionReview of 1 000 Sandboxes: best ${best.toFixed(1)} ms of 7\n`);
    assert.ok(best < 100, `took ${best} ms`);
  });
});

/** One request; the body goes out in 1 MiB writes (so a large one is streamed when `headers` say chunked). */
function post(
  port: number,
  ca: string,
  body: string,
  path = '/convert',
  method = 'POST',
  headers: Record<string, string | number> = {},
) {
  return new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, method, ca, servername: 'svc.ns.svc', headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString() }));
    });
    req.on('error', reject);
    for (let i = 0; i < body.length; i += 1 << 20) req.write(body.slice(i, i + (1 << 20)));
    req.end();
  });
}

const serving = generateBundle({
  serviceName: 'svc',
  namespace: 'ns',
  clusterDomain: 'cluster.local',
  extraSans: ['127.0.0.1'],
});
const startServer = () =>
  startConversionWebhookServer({ port: 0, host: '127.0.0.1', tls: serving, logger: silentLogger });

describe('conversion webhook HTTPS server', () => {
  it('serves /convert over TLS trusted through the generated CA, and survives garbage', async () => {
    const server = await startServer();
    try {
      const objects = wire(fc.sample(arb.sandboxClaimV1alpha1, { numRuns: 5, seed: 5 }));
      const ok = await post(
        server.port,
        serving.caPem,
        JSON.stringify(review(objects, 'extensions.agents.x-k8s.io/v1beta1')),
      );
      assert.equal(ok.status, 200);
      const parsed = JSON.parse(ok.body) as { response: { result: { status: string }; convertedObjects: unknown[] } };
      assert.equal(parsed.response.result.status, 'Success');
      assert.equal(parsed.response.convertedObjects.length, 5);

      const garbage = await post(server.port, serving.caPem, '{"apiVersion": "apiextensions.k8s.io/v1", kind');
      assert.equal(garbage.status, 200);
      const g = JSON.parse(garbage.body) as { response: { result: { status: string; message: string } } };
      assert.equal(g.response.result.status, 'Failure');
      assert.match(g.response.result.message, /not valid JSON/);

      assert.equal((await post(server.port, serving.caPem, '', '/healthz', 'GET')).body, 'ok');
      assert.equal((await post(server.port, serving.caPem, '', '/other')).status, 404);
      assert.equal((await post(server.port, serving.caPem, '', '/convert', 'GET')).status, 405);
      // Still alive after all of that.
      assert.equal(
        (await post(server.port, serving.caPem, JSON.stringify(review([], 'agents.x-k8s.io/v1alpha1')))).status,
        200,
      );
    } finally {
      await server.close();
    }
  });
});

describe('conversion webhook exposure', () => {
  it('refuses a body over 32 MiB with a Failure review, streamed or declared, and keeps serving', async () => {
    const server = await startServer();
    try {
      const small = JSON.stringify(review([], 'agents.x-k8s.io/v1alpha1'));
      // Valid JSON (trailing blanks), one byte over the cap: the old 128 MiB limit would have parsed it.
      const over = small + ' '.repeat(32 * 1024 * 1024 + 1 - small.length);
      const sendOver = (chunked: boolean) =>
        post(server.port, serving.caPem, over, '/convert', 'POST', {
          ...(chunked ? { 'transfer-encoding': 'chunked' } : { 'content-length': over.length }),
        });
      for (const chunked of [false, true]) {
        const r = await sendOver(chunked);
        assert.equal(r.status, 200);
        const result = (JSON.parse(r.body) as { response: { result: { status: string; message: string } } }).response
          .result;
        assert.equal(result.status, 'Failure', `chunked=${chunked}`);
        assert.match(result.message, /request body exceeds 33554432 bytes.*--webhook-max-body-bytes/);
      }
      const ok = await post(server.port, serving.caPem, small);
      assert.equal(
        (JSON.parse(ok.body) as { response: { result: { status: string } } }).response.result.status,
        'Success',
      );
    } finally {
      await server.close();
    }
  });

  it('listens only on the address of its webhook URL, the one the apiserver dials', async () => {
    const certDir = await mkdtemp(join(tmpdir(), 'sbx-webhook-bind-'));
    const hook = await startWebhook({
      port: 0,
      certDir,
      manageCerts: true,
      serviceName: 'svc',
      namespace: 'ns',
      clusterDomain: 'cluster.local',
      webhookUrl: (port) => `https://127.0.0.1:${port}/convert`,
      extensions: false,
      store: new MemoryStore(),
      logger: silentLogger,
    });
    const dial = (host: string) =>
      new Promise<string>((resolve) => {
        const s = connect({ host, port: hook.port }, () => {
          s.destroy();
          resolve('connected');
        });
        s.on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
      });
    try {
      assert.equal(await dial('127.0.0.1'), 'connected');
      // Another address of this host (all of 127/8 is local): not listened on.
      assert.equal(await dial('127.0.0.2'), 'ECONNREFUSED');
    } finally {
      await hook.close();
      await rm(certDir, { recursive: true, force: true });
    }
  });
});

describe('webhook certificates', () => {
  const id = { serviceName: 'sandbox-webhook-service', namespace: 'sandbox-system', clusterDomain: 'cluster.local' };

  it('creates an ECDSA P-256 CA and a serving certificate with the spec SANs, then reuses them', async () => {
    const store = new MemoryStore();
    const first = await ensureCertSecret(store, 'sandbox-webhook-certs', id, silentLogger);
    const ca = new X509Certificate(first.caPem);
    const cert = new X509Certificate(first.certPem);
    assert.equal(ca.subject, 'CN=sandbox-conversion-webhook-ca');
    assert.ok(ca.ca);
    assert.equal(cert.subject, 'CN=sandbox-webhook-service.sandbox-system.svc');
    assert.equal(
      cert.subjectAltName,
      'DNS:sandbox-webhook-service, DNS:sandbox-webhook-service.sandbox-system, DNS:sandbox-webhook-service.sandbox-system.svc, DNS:sandbox-webhook-service.sandbox-system.svc.cluster.local',
    );
    assert.ok(cert.verify(ca.publicKey));
    assert.equal(cert.publicKey.asymmetricKeyDetails?.namedCurve, 'prime256v1');
    const days = (Date.parse(cert.validTo) - Date.now()) / 86_400_000;
    assert.ok(days > 364 && days < 366, `valid for ${days} days`);
    const again = await ensureCertSecret(store, 'sandbox-webhook-certs', id, silentLogger);
    assert.deepEqual(again, first);
  });

  it('renews when the certificate does not cover a needed name', async () => {
    const store = new MemoryStore();
    const first = await ensureCertSecret(store, 's', id, silentLogger);
    const withIp = { ...id, extraSans: ['10.1.2.3'] };
    assert.match(unfitReason(first, withIp) ?? '', /does not cover 10.1.2.3/);
    const renewed = await ensureCertSecret(store, 's', withIp, silentLogger);
    assert.notEqual(renewed.certPem, first.certPem);
    assert.equal(unfitReason(renewed, withIp), undefined);
  });

  it('adopts the Secret of a process that won the create race', async () => {
    const store = new MemoryStore();
    store.raceOnce = true;
    const bundle = await ensureCertSecret(store, 's', { ...id, serviceName: 'svc' }, silentLogger);
    assert.equal(bundle.caPem, store.secrets.get('sandbox-system/s')?.data['ca.crt']);
  });

  it('patches only CRDs converted by webhook, by Service or by URL', async () => {
    const store = new MemoryStore();
    store.crds.set('sandboxes.agents.x-k8s.io', { strategy: 'Webhook', conversionReviewVersions: ['v1', 'v1beta1'] });
    store.crds.set('sandboxclaims.extensions.agents.x-k8s.io', {
      strategy: 'None',
      conversionReviewVersions: undefined,
    });
    const target = { service: { name: 'svc', namespace: 'ns', path: '/convert' } };
    const patched = await injectCaBundle(
      store,
      ['sandboxes.agents.x-k8s.io', 'sandboxclaims.extensions.agents.x-k8s.io', 'missing.x'],
      target,
      'CA',
      silentLogger,
    );
    assert.deepEqual(patched, ['sandboxes.agents.x-k8s.io']);
    assert.deepEqual(store.patches[0]![1], {
      spec: {
        conversion: {
          strategy: 'Webhook',
          webhook: {
            clientConfig: {
              service: { name: 'svc', namespace: 'ns', path: '/convert' },
              url: null,
              caBundle: Buffer.from('CA').toString('base64'),
            },
          },
        },
      },
    });
    assert.deepEqual(conversionPatch({ ...target, url: 'https://10.0.0.1:9443/convert' }, 'CA', []), {
      spec: {
        conversion: {
          strategy: 'Webhook',
          webhook: {
            clientConfig: { url: 'https://10.0.0.1:9443/convert', service: null, caBundle: 'Q0E=' },
            conversionReviewVersions: ['v1', 'v1beta1'],
          },
        },
      },
    });
  });
});
