/**
 * What bench/scale reads from the running system, each from its own source: etcd's own metrics and key space (from
 * inside the cluster's network namespace, where etcd listens), the nodes' telemetry (`sandboxd_pool_warm` on each
 * sandboxd's /metrics), kube-apiserver and sandbox-apiserver over HTTPS with the admin certificate, and process RSS.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { Agent as HttpAgent, request as httpRequest } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { promisify } from 'node:util';
import type { Platform } from '../../src/cli/platform.js';
import { percentile } from '../claim-driver.js';

const run = promisify(execFile);

// ------------------------------------------------------------------ etcd

async function inNetns(netns: string, args: string[]): Promise<string> {
  const { stdout } = await run('ip', ['netns', 'exec', netns, 'curl', '-s', '--max-time', '30', ...args], {
    maxBuffer: 256 << 20,
  });
  return stdout;
}

/** Writes etcd has applied so far: puts and deletes (kube-apiserver's updates are txns with one put each). */
export async function etcdWrites(netns: string): Promise<{ puts: number; deletes: number; total: number }> {
  const text = await inNetns(netns, ['http://127.0.0.1:2381/metrics']);
  const val = (name: string) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);
  const puts = val('etcd_mvcc_put_total');
  const deletes = val('etcd_mvcc_delete_total');
  if (!Number.isFinite(puts) || !Number.isFinite(deletes))
    throw new Error('etcd metrics lack etcd_mvcc_put_total / etcd_mvcc_delete_total');
  return { puts, deletes, total: puts + deletes };
}

/** Every key etcd holds (its JSON gateway, keys only). */
export async function etcdKeys(netns: string): Promise<string[]> {
  const zero = Buffer.from('\0').toString('base64');
  const body = JSON.stringify({ key: zero, range_end: zero, keys_only: true });
  const out = JSON.parse(await inNetns(netns, ['-X', 'POST', 'http://127.0.0.1:2379/v3/kv/range', '-d', body])) as {
    kvs?: Array<{ key: string }>;
  };
  return (out.kvs ?? []).map((kv) => Buffer.from(kv.key, 'base64').toString('utf8'));
}

/** `/registry/<group>/<resource>` (or `/registry/<resource>`) of a key: what kind of object it is. */
export function keyKind(key: string): string {
  const parts = key.split('/').filter(Boolean);
  if (parts[0] !== 'registry') return parts[0] ?? key;
  return parts[1]?.includes('.') ? `${parts[1]}/${parts[2]}` : (parts[1] ?? key);
}

// ------------------------------------------------------------------ nodes

export interface NodeRef {
  node: string;
  address: string;
  token: string;
}

const nodeAgent = new HttpAgent({ keepAlive: true, maxSockets: 64 });

export function nodeCall(
  n: NodeRef,
  method: string,
  path: string,
  body?: unknown,
): Promise<{ status: number; text: string }> {
  const payload = body === undefined ? undefined : JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      `http://${n.address}${path}`,
      {
        method,
        agent: nodeAgent,
        headers: {
          authorization: `Bearer ${n.token}`,
          ...(payload ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) } : {}),
        },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (text += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}

export async function nodeRefs(p: Platform): Promise<NodeRef[]> {
  return Promise.all(
    p.sandboxd.map(async (n) => ({
      node: n.node,
      address: n.address,
      token: (await readFile(n.tokenFile, 'utf8')).trim(),
    })),
  );
}

/** Node telemetry: sum over the nodes of `sandboxd_pool_warm` (each node's /metrics), and whether all answered. */
export async function warmOnNodes(nodes: readonly NodeRef[]): Promise<number> {
  const counts = await Promise.all(
    nodes.map(async (n) => {
      const { status, text } = await nodeCall(n, 'GET', '/metrics');
      if (status !== 200) throw new Error(`${n.node} /metrics: HTTP ${status}`);
      let sum = 0;
      for (const m of text.matchAll(/^sandboxd_pool_warm\{[^}]*\} (\d+)$/gm)) sum += Number(m[1]);
      return sum;
    }),
  );
  return counts.reduce((a, b) => a + b, 0);
}

/** `<name>_sum` and `<name>_count` of a Prometheus histogram, summed over the series whose labels match `labels`. */
export function histogramTotals(text: string, name: string, labels: RegExp): { sum: number; count: number } {
  const out = { sum: 0, count: 0 };
  for (const m of text.matchAll(new RegExp(`^${name}_(sum|count)\\{([^}]*)\\} (\\S+)$`, 'gm')))
    if (labels.test(m[2]!)) out[m[1] as 'sum' | 'count'] += Number(m[3]);
  return out;
}

/**
 * Where a serial claim's time goes, as the servers measure it: time inside sandbox-apiserver's create and inside
 * the node's claim handling, summed (sandbox-apiserver's and every node's /metrics), to diff around a phase.
 */
export async function claimTimeInServers(
  direct: Https,
  nodes: readonly NodeRef[],
): Promise<{ apiserverS: number; apiserverN: number; nodeS: number; nodeN: number }> {
  const api = histogramTotals(
    (await direct.get('/metrics', 'text/plain')).body,
    'apiserver_request_duration_seconds',
    /verb="create"/,
  );
  const node = { sum: 0, count: 0 };
  for (const n of nodes) {
    const t = histogramTotals((await nodeCall(n, 'GET', '/metrics')).text, 'sandboxd_claim_seconds', /tier="warm"/);
    node.sum += t.sum;
    node.count += t.count;
  }
  return { apiserverS: api.sum, apiserverN: api.count, nodeS: node.sum, nodeN: node.count };
}

// ------------------------------------------------------------------ HTTPS with the admin certificate

export interface Https {
  get(path: string, accept?: string): Promise<{ status: number; body: string; firstByteMs: number; ms: number }>;
  post(path: string, body: unknown): Promise<{ status: number; body: string; ms: number }>;
  del(path: string): Promise<number>;
  mergePatch(path: string, body: unknown): Promise<{ status: number; body: string; ms: number }>;
  /** Stream `path` until `done(line)` says so; resolves with ms to that line and the lines seen. */
  stream(path: string, done: (line: string) => boolean): Promise<{ ms: number; lines: number }>;
}

/** How long one request of adminHttps may go without a byte before it fails (not for streams). */
export const REQUEST_TIMEOUT_MS = 120_000;

export class RequestTimeout extends Error {}

/** A client for `base` (kube-apiserver or sandbox-apiserver) with the cluster's admin client certificate. */
export function adminHttps(p: Platform, base: string, caFile: string): Https {
  const agent = new HttpsAgent({
    keepAlive: true,
    maxSockets: 64,
    ca: readFileSync(caFile),
    cert: readFileSync(p.cluster.pki.admin.cert),
    key: readFileSync(p.cluster.pki.admin.key),
  });
  const call = (
    method: string,
    path: string,
    body: string | undefined,
    accept = 'application/json',
    contentType = 'application/json',
  ) =>
    new Promise<{ status: number; body: string; firstByteMs: number; ms: number }>((resolve, reject) => {
      const t0 = performance.now();
      const req = httpsRequest(
        `${base}${path}`,
        {
          method,
          agent,
          headers: {
            accept,
            ...(body ? { 'content-type': contentType, 'content-length': Buffer.byteLength(body) } : {}),
          },
        },
        (res) => {
          const firstByteMs = performance.now() - t0;
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () =>
            resolve({
              status: res.statusCode ?? 0,
              body: Buffer.concat(chunks).toString('utf8'),
              firstByteMs,
              ms: performance.now() - t0,
            }),
          );
          res.on('error', reject);
        },
      );
      req.on('error', reject);
      // A request the server never answers is an error naming it, not a run that hangs.
      req.setTimeout(REQUEST_TIMEOUT_MS, () =>
        req.destroy(new RequestTimeout(`${method} ${path}: no answer within ${REQUEST_TIMEOUT_MS} ms`)),
      );
      req.end(body);
    });
  return {
    get: (path, accept) => call('GET', path, undefined, accept),
    post: async (path, body) => call('POST', path, JSON.stringify(body)),
    del: async (path) => (await call('DELETE', path, undefined)).status,
    mergePatch: async (path, body) =>
      call('PATCH', path, JSON.stringify(body), 'application/json', 'application/merge-patch+json'),
    stream: (path, done) =>
      new Promise((resolve, reject) => {
        const t0 = performance.now();
        let lines = 0;
        const req = httpsRequest(`${base}${path}`, { agent, headers: { accept: 'application/json' } }, (res) => {
          if (res.statusCode !== 200) {
            res.resume();
            reject(new Error(`${path}: HTTP ${res.statusCode}`));
            return;
          }
          let buf = '';
          res.setEncoding('utf8');
          res.on('data', (c: string) => {
            buf += c;
            let nl: number;
            while ((nl = buf.indexOf('\n')) >= 0) {
              const line = buf.slice(0, nl);
              buf = buf.slice(nl + 1);
              lines++;
              if (done(line)) {
                resolve({ ms: performance.now() - t0, lines });
                req.destroy();
                return;
              }
            }
          });
          res.on('end', () => reject(new Error(`${path}: stream ended before it was done`)));
        });
        req.on('error', (err) => (lines ? undefined : reject(err)));
        req.end();
      }),
  };
}

// ------------------------------------------------------------------ processes

/** Resident set size of a process (kB → MiB), or NaN when it is gone. */
export function rssMiB(pid: number): number {
  try {
    const kb = Number(/^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]);
    return kb / 1024;
  } catch {
    return NaN;
  }
}

/** RSS of the platform's processes, grouped: sandboxd (sum, max), sandbox-apiserver, kube-apiserver, etcd. */
export function platformRss(p: Platform): Record<string, number> {
  const byName = (name: string) => p.cluster.processes().find((x) => x.name === name)?.pid;
  const nodes = p.components.filter((c) => c.name.startsWith('sandboxd-')).map((c) => rssMiB(c.pid));
  const api = p.components.find((c) => c.name === 'sandbox-apiserver');
  const etcd = byName('etcd');
  const kube = byName('kube-apiserver');
  return {
    sandboxdSum: nodes.reduce((a, b) => a + b, 0),
    sandboxdMax: Math.max(...nodes),
    sandboxApiserver: api ? rssMiB(api.pid) : NaN,
    kubeApiserver: kube ? rssMiB(kube) : NaN,
    etcd: etcd ? rssMiB(etcd) : NaN,
  };
}

// ------------------------------------------------------------------ numbers

/** The p-th percentile of unsorted `xs` (the convention of bench/claim-driver). */
export function pct(xs: readonly number[], p: number): number {
  return percentile(
    [...xs].sort((a, b) => a - b),
    p,
  );
}

/** Least-squares line y = a + b·x. */
export function fitLine(points: ReadonlyArray<{ x: number; y: number }>): { a: number; b: number } {
  const n = points.length;
  const mx = points.reduce((s, p) => s + p.x, 0) / n;
  const my = points.reduce((s, p) => s + p.y, 0) / n;
  const sxy = points.reduce((s, p) => s + (p.x - mx) * (p.y - my), 0);
  const sxx = points.reduce((s, p) => s + (p.x - mx) ** 2, 0);
  const b = sxy / sxx;
  return { a: my - b * mx, b };
}
