/**
 * `/healthz`, `/livez`, `/readyz` as k8s.io/apiserver serves them (pkg/server/healthz): 200 `ok` when every check
 * passes, 500 naming the failed ones, `?verbose` for one `[+]name ok` line per check, `?exclude=name` to skip one,
 * and `/<endpoint>/<check>` for a single check. No credentials needed: probes send none. Readiness drives the
 * EndpointSlice the aggregator routes by, so it fails until the server can answer from a synced view.
 */
import type { ServerResponse } from 'node:http';

export type Check = () => string | undefined;

const ENDPOINTS = ['/healthz', '/livez', '/readyz'] as const;
type Endpoint = (typeof ENDPOINTS)[number];

export class HealthChecks {
  private readonly checks: Record<Endpoint, Map<string, Check>> = {
    '/healthz': new Map([['ping', () => undefined]]),
    '/livez': new Map([['ping', () => undefined]]),
    '/readyz': new Map([['ping', () => undefined]]),
  };

  /** Add a check to some endpoints (`/healthz` aggregates all); it returns undefined when fine, else why not. */
  add(name: string, check: Check, endpoints: readonly Endpoint[]): void {
    for (const e of new Set<Endpoint>([...endpoints, '/healthz'])) this.checks[e].set(name, check);
  }

  handles(path: string): boolean {
    return ENDPOINTS.some((e) => path === e || path.startsWith(`${e}/`));
  }

  serve(url: URL, res: ServerResponse): void {
    const endpoint = ENDPOINTS.find((e) => url.pathname === e || url.pathname.startsWith(`${e}/`))!;
    const single = url.pathname.slice(endpoint.length + 1);
    const excluded = new Set(url.searchParams.getAll('exclude'));
    const all = this.checks[endpoint];
    const chosen = single ? [...all].filter(([n]) => n === single) : [...all].filter(([n]) => !excluded.has(n));
    if (single && chosen.length === 0) {
      reply(res, 404, `404 page not found: no check "${single}" under ${endpoint}\n`);
      return;
    }
    const results = chosen.map(([name, check]) => {
      let why: string | undefined;
      try {
        why = check();
      } catch (err) {
        why = (err as Error).message;
      }
      return { name, why };
    });
    const failed = results.filter((r) => r.why !== undefined);
    const verbose = url.searchParams.has('verbose') || failed.length > 0;
    const lines = results.map((r) => (r.why === undefined ? `[+]${r.name} ok` : `[-]${r.name} failed: ${r.why}`));
    if (failed.length) reply(res, 500, `${lines.join('\n')}\n${endpoint.slice(1)} check failed\n`);
    else reply(res, 200, verbose ? `${lines.join('\n')}\n${endpoint.slice(1)} check passed\n` : 'ok');
  }
}

function reply(res: ServerResponse, status: number, body: string): void {
  res.writeHead(status, {
    'content-type': 'text/plain; charset=utf-8',
    'x-content-type-options': 'nosniff',
    'content-length': Buffer.byteLength(body),
  });
  res.end(body);
}
