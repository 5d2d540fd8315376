/**
 * Root-token calls to the sandboxd nodes a benchmark started (bench/placement, bench/resume): a JSON call, one that
 * must answer a given status, waiting for a node's pool to be warm; and the timing and summary helpers they share.
 */
import { Agent, type IncomingHttpHeaders } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { percentile } from '../claim-driver.js';
import { callJson } from './http-json.js';

export interface Answer {
  status: number;
  json: Record<string, unknown>;
  headers: IncomingHttpHeaders;
}

export class NodeApi {
  private readonly agent = new Agent({ keepAlive: true, maxSockets: 8 });
  /** The fleet's root token (read from a node's token file once the platform is up). */
  token = '';

  call(addr: string, method: string, path: string, body?: unknown): Promise<Answer> {
    const [host = '', port] = addr.split(':');
    return callJson({ host, port: Number(port), agent: this.agent, token: this.token }, method, path, body);
  }

  async must(addr: string, method: string, path: string, body?: unknown, status = 200): Promise<Answer> {
    const r = await this.call(addr, method, path, body);
    if (r.status !== status) throw new Error(`${method} ${addr}${path}: ${r.status} ${JSON.stringify(r.json)}`);
    return r;
  }

  release(addr: string, id: string): Promise<Answer> {
    return this.must(addr, 'POST', `/v1/sandboxes/${id}/release`, undefined, 204);
  }

  /** Until the node's pool has `warm` VMs, primed (5 min at most). */
  async waitWarm(addr: string, warm: number): Promise<void> {
    for (let i = 0; i < 1200; i++) {
      const info = await this.must(addr, 'GET', '/v1/info');
      const p = (info.json.pools as Array<{ warm: number; primed: number; target: number }>).find((x) => x.target > 0);
      if (p && p.warm >= warm && p.primed >= warm) return;
      await sleep(250);
    }
    throw new Error(`${addr}: no ${warm} warm VMs after 5 min`);
  }
}

export async function timed<T>(f: () => Promise<T>): Promise<{ ms: number; value: T }> {
  const t0 = performance.now();
  const value = await f();
  return { ms: performance.now() - t0, value };
}

export function summary(xs: number[]): { p50: number; p95: number; n: number } {
  const s = [...xs].sort((a, b) => a - b);
  return { p50: +percentile(s, 50).toFixed(1), p95: +percentile(s, 95).toFixed(1), n: s.length };
}
