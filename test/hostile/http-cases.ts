/**
 * The table of hostile HTTP inputs every listener of the registry gets (http-listeners.test.ts): fixed cases for
 * each class of defect found so far, plus seeded random ones (fast-check, `SBX_HOSTILE_SEED`) whose number grows in
 * long mode (`SBX_HOSTILE_LONG=1`, bench/hostile-http.ts). A case is bytes and pauses sent on one connection.
 */
import fc from 'fast-check';
import type { HostileTarget } from './http-registry.js';
import { headerLines } from './http-wire.js';

export const LONG = process.env.SBX_HOSTILE_LONG === '1';
export const SEED = Number(process.env.SBX_HOSTILE_SEED ?? 28);

export interface HostileCase {
  name: string;
  chunks(t: HostileTarget): Array<string | Buffer | number>;
  /** How long to wait for the server to close the connection itself (ms; default 50). */
  holdMs?: number;
}

/** The request-targets of issue 28 item 1 (each one crashed a daemon) and their relatives. */
export const MALFORMED_TARGETS = [
  '//',
  '///',
  '//@',
  '//:80',
  '/\\',
  '//evil.example/x',
  '//a:b@c/',
  '/\\\\evil/x',
  '*',
  'http://x/',
  'x',
  '/%',
  '/%zz/%E0%A4%A',
  '/../../../etc/passwd',
  '/./.././//..',
  `/${'a'.repeat(7000)}`,
  '/?%%%',
  '/#frag',
];

const line = (method: string, target: string, t: HostileTarget, extra = '') =>
  `${method} ${target} HTTP/1.1\r\nHost: 127.0.0.1\r\n${headerLines(t.headers)}${extra}`;

const JSON_BODIES = [
  'null',
  '1',
  '-1e309',
  '"s"',
  'true',
  '[]',
  '[null]',
  '{}',
  '{"a":',
  '{"__proto__":{"x":1}}',
  '{"metadata":null,"spec":[]}',
  '{"template":{},"ttl_seconds":"1\\n","object":7}',
  '['.repeat(20_000),
  `"${'x'.repeat(100_000)}"`,
  '\u0000\u00ff',
];

function fixedCases(): HostileCase[] {
  const cases: HostileCase[] = [];
  for (const target of MALFORMED_TARGETS) {
    cases.push({ name: `GET ${target.slice(0, 30)}`, chunks: (t) => [line('GET', target, t, '\r\n')] });
    cases.push({
      name: `POST ${target.slice(0, 30)} with a body`,
      chunks: (t) => [line('POST', target, t, 'content-type: application/json\r\ncontent-length: 2\r\n\r\n{}')],
    });
    cases.push({
      name: `upgrade ${target.slice(0, 30)}`,
      chunks: (t) => [
        line('GET', target, t, 'connection: Upgrade\r\nupgrade: websocket\r\nsec-websocket-version: 13\r\n'),
        'sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n',
      ],
    });
  }
  const raw: Array<[string, (t: HostileTarget) => string]> = [
    ['empty request line', () => '\r\n\r\n'],
    ['no version', () => 'GET /\r\n\r\n'],
    ['HTTP/9.9', (t) => `GET ${t.good.path} HTTP/9.9\r\nHost: x\r\n\r\n`],
    ['NUL in method', () => 'G\u0000T / HTTP/1.1\r\nHost: x\r\n\r\n'],
    ['binary garbage', () => '\u0016\u0003\u0001\u0002\u0000\u0001\u0000\u01fc\u0003\u0003'],
    ['TLS hello to plain / plain to TLS', () => 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'],
    ['header without colon', (t) => line('GET', t.good.path, t, 'no colon here\r\n\r\n')],
    ['invalid header name', (t) => line('GET', t.good.path, t, 'bad name: x\r\n\r\n')],
    ['CR in header value', (t) => line('GET', t.good.path, t, 'x-a: b\rc\r\n\r\n')],
    ['duplicate Host', (t) => line('GET', t.good.path, t, 'Host: other\r\n\r\n')],
    ['oversized header', (t) => line('GET', t.good.path, t, `x-big: ${'a'.repeat(70_000)}\r\n\r\n`)],
    [
      'many headers',
      (t) => line('GET', t.good.path, t, `${Array.from({ length: 3000 }, (_, i) => `x-h${i}: ${i}\r\n`).join('')}\r\n`),
    ],
    [
      'duplicate authorization',
      (t) => line('GET', t.good.path, t, 'authorization: Bearer a\r\nauthorization: Bearer b\r\n\r\n'),
    ],
    ['bearer of nothing', (t) => line('GET', t.good.path, t, 'authorization: Bearer \r\n\r\n')],
  ];
  for (const [name, f] of raw) cases.push({ name, chunks: (t) => [f(t)] });
  for (const b of [
    'content-length: 5\r\ncontent-length: 6',
    'content-length: -1',
    'content-length: 1e3',
    'content-length: 99999999999999999999',
  ]) {
    cases.push({
      name: `bad length ${b.slice(0, 30)}`,
      chunks: (t) => [line('POST', t.bodies[0]!.path, t, `${b}\r\n\r\nhello`)],
    });
  }
  const chunked = (t: HostileTarget, body: string) =>
    line('POST', t.bodies[0]!.path, t, `content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n${body}`);
  for (const [name, body] of [
    ['chunk size not hex', 'zz\r\n{}\r\n0\r\n\r\n'],
    ['chunk size huge', 'ffffffffffffffff\r\n{}\r\n0\r\n\r\n'],
    ['chunk without CRLF', '2\r\n{}0\r\n\r\n'],
    ['chunk truncated', '10\r\n{"a"'],
    ['chunk extension flood', `1;${'x=y;'.repeat(5000)}\r\n{\r\n0\r\n\r\n`],
    ['trailer flood', `0\r\n${'x-t: 1\r\n'.repeat(5000)}\r\n`],
  ] as const)
    cases.push({ name, chunks: (t) => [chunked(t, body)] });
  cases.push({
    name: 'chunked and content-length',
    chunks: (t) => [
      line('POST', t.bodies[0]!.path, t, 'content-length: 4\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n'),
    ],
  });
  cases.push({
    name: 'truncated body',
    chunks: (t) => [
      line('POST', t.bodies[0]!.path, t, 'content-type: application/json\r\ncontent-length: 100\r\n\r\n{"a"'),
    ],
  });
  cases.push({
    name: 'slow body (a byte at a time)',
    chunks: (t) => [
      line('POST', t.bodies[0]!.path, t, 'content-type: application/json\r\ncontent-length: 100\r\n\r\n'),
      ...Array.from({ length: LONG ? 40 : 4 }, () => ['{', 50] as const).flat(),
    ],
    holdMs: 100,
  });
  cases.push({
    name: 'slow headers',
    chunks: (t) => [`GET ${t.good.path} HTTP/1.1\r\n`, 100, 'Host: x\r\n', 100, 'x-a: 1\r\n'],
    holdMs: 100,
  });
  cases.push({
    name: 'pipelining flood of GETs with unknown bearer tokens',
    chunks: (t) => [
      Array.from(
        { length: LONG ? 2000 : 300 },
        (_, i) => `GET ${t.good.path} HTTP/1.1\r\nHost: x\r\nauthorization: Bearer flood-${i}\r\n\r\n`,
      ).join(''),
    ],
  });
  cases.push({
    name: 'pipelining flood of bodies',
    chunks: (t) => {
      const body = `{"pad":"${'x'.repeat(8000)}"}`;
      const r = t.bodies[0]!;
      const one = line(
        r.method,
        r.path,
        t,
        `authorization: Bearer pipe\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`,
      );
      return [one.repeat(LONG ? 500 : 60)];
    },
  });
  for (const body of JSON_BODIES)
    cases.push({
      name: `JSON body ${JSON.stringify(body.slice(0, 20))}`,
      chunks: (t) =>
        t.bodies.map((r) =>
          line(
            r.method,
            r.path,
            t,
            `${headerLines({ 'content-type': 'application/json', ...r.headers })}content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
          ),
        ),
    });
  return cases;
}

/** Seeded random request-targets and request lines from the alphabets that broke parsers before. */
function randomCases(): HostileCase[] {
  const runs = LONG ? 400 : 25;
  const targetArb = fc
    .array(fc.constantFrom('/', '\\', '@', ':', '%', '.', '?', '#', 'a', '0', '[', ']', '%2F', '%00', '\u00e9', ' '), {
      minLength: 1,
      maxLength: 12,
    })
    .map((parts) => parts.join('').replace(/ /g, ''));
  const targetCases = fc.sample(targetArb, { numRuns: runs, seed: SEED }).map((target, i): HostileCase => ({
    name: `random target #${i} ${JSON.stringify(target)}`,
    chunks: (t) => [line(i % 2 ? 'POST' : 'GET', target || '/', t, 'content-length: 0\r\n\r\n')],
  }));
  const bytesCases = fc
    .sample(fc.uint8Array({ minLength: 1, maxLength: 512 }), { numRuns: runs, seed: SEED + 1 })
    .map((bytes, i): HostileCase => ({
      name: `random bytes #${i}`,
      chunks: (t) => [
        line('POST', t.bodies[0]!.path, t, `content-length: ${bytes.length}\r\n\r\n`),
        Buffer.from(bytes),
      ],
    }));
  return [...targetCases, ...bytesCases];
}

export const cases: HostileCase[] = [...fixedCases(), ...randomCases()];
