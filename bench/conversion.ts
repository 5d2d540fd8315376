/**
 * Conversion webhook benchmark: ConversionReviews of 1 000 objects of one kind (what the apiserver sends for a list),
 * hub -> v1alpha1 and back, timed in process (handleConversionReview) and over HTTPS (POST /convert with
 * JSON encode/decode and TLS). Run: `node --import tsx bench/conversion.ts [--iterations N]`.
 */
import { request } from 'node:https';
import fc from 'fast-check';
import { convertObject } from '../src/api/index.js';
import { silentLogger } from '../src/log/logger.js';
import { generateBundle, handleConversionReview, startConversionWebhookServer } from '../src/operator/webhook/index.js';
import * as arb from '../test/api/arbitraries.js';

const iterations = Number(process.argv[process.argv.indexOf('--iterations') + 1] || 50);
const BATCH = 1000;

function sample<T>(a: fc.Arbitrary<T>, n: number, seed: number): T[] {
  return fc.sample(a, { numRuns: n, seed });
}

function review(objects: Record<string, unknown>[], desired: (o: Record<string, unknown>) => string, uid: string) {
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'ConversionReview',
    request: { uid, desiredAPIVersion: desired(objects[0]!), objects },
  };
}
const toAlpha = (o: Record<string, unknown>) => String(o['apiVersion']).replace('v1beta1', 'v1alpha1');

function stats(samples: number[]): { median: number; p95: number; min: number } {
  const s = [...samples].sort((a, b) => a - b);
  return { median: s[Math.floor(s.length / 2)]!, p95: s[Math.floor(s.length * 0.95)]!, min: s[0]! };
}
const fmt = (x: { median: number; p95: number; min: number }) =>
  `median ${x.median.toFixed(2)} ms, p95 ${x.p95.toFixed(2)} ms, min ${x.min.toFixed(2)} ms`;

function time(fn: () => void): number {
  const t = process.hrtime.bigint();
  fn();
  return Number(process.hrtime.bigint() - t) / 1e6;
}

// Per kind: 1 000 objects of one kind (what the apiserver sends for a list), both directions.
const perKind: [string, fc.Arbitrary<object>][] = [
  ['Sandbox', arb.sandboxV1beta1],
  ['SandboxTemplate', arb.sandboxTemplateV1beta1],
  ['SandboxWarmPool', arb.sandboxWarmPoolV1beta1],
  ['SandboxClaim', arb.sandboxClaimV1beta1],
];
console.log(
  `conversion webhook benchmark: ${BATCH}-object ConversionReview, ${iterations} iterations (node ${process.version})`,
);
for (const [kind, a] of perKind) {
  const hub = sample(a, BATCH, 42).map((o) => JSON.parse(JSON.stringify(o)) as Record<string, unknown>);
  const alpha = hub.map((o) => convertObject(o, toAlpha(o)));
  const down = review(hub, toAlpha, 'down');
  const up = review(alpha, (o) => String(o['apiVersion']).replace('v1alpha1', 'v1beta1'), 'up');
  for (let i = 0; i < 5; i++) {
    handleConversionReview(down);
    handleConversionReview(up);
  }
  const d = stats(Array.from({ length: iterations }, () => time(() => handleConversionReview(down))));
  const u = stats(Array.from({ length: iterations }, () => time(() => handleConversionReview(up))));
  console.log(`  ${kind.padEnd(16)} v1beta1->v1alpha1 ${fmt(d)} | v1alpha1->v1beta1 ${fmt(u)}`);
}

// Over HTTPS (JSON parse + convert + stringify + TLS on loopback).
const body = JSON.stringify(
  review(
    sample(arb.sandboxV1beta1, BATCH, 7).map((o) => JSON.parse(JSON.stringify(o)) as Record<string, unknown>),
    toAlpha,
    'https',
  ),
);
const bundle = generateBundle({
  serviceName: 'bench',
  namespace: 'bench',
  clusterDomain: 'cluster.local',
  extraSans: ['127.0.0.1'],
});
const server = await startConversionWebhookServer({ port: 0, host: '127.0.0.1', tls: bundle, logger: silentLogger });
const post = () =>
  new Promise<number>((resolve, reject) => {
    const t = process.hrtime.bigint();
    const req = request(
      {
        host: '127.0.0.1',
        port: server.port,
        path: '/convert',
        method: 'POST',
        ca: bundle.caPem,
        servername: 'bench',
        headers: { 'Content-Type': 'application/json' },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const out = JSON.parse(Buffer.concat(chunks).toString()) as { response: { result: { status: string } } };
          if (out.response.result.status !== 'Success') reject(new Error(JSON.stringify(out.response.result)));
          else resolve(Number(process.hrtime.bigint() - t) / 1e6);
        });
      },
    );
    req.on('error', reject);
    req.end(body);
  });
for (let i = 0; i < 3; i++) await post();
const h: number[] = [];
for (let i = 0; i < iterations; i++) h.push(await post());
console.log(`  HTTPS POST /convert, 1 000 Sandboxes (${(body.length / 1024).toFixed(0)} KiB): ${fmt(stats(h))}`);
await server.close();
