/**
 * The drain's routes (docs/sandboxd-api.md "Draining"): `POST /v1/drain` starts the operator's drain, `DELETE
 * /v1/drain` ends it (the node stays drained while its Node is cordoned), both root only and both answering what
 * `GET /v1/info` reports about it. The work is drain.ts.
 */
import { Gauge, type Registry } from 'prom-client';
import { SandboxError } from '../errors.js';
import { API_REASON, type DrainStatus, type NodeDrain } from './drain.js';
import { json, readJson, requireOperator, type SandboxdApi } from './http-api.js';

/** What `GET /v1/info` says about draining: `draining: true` (the reference's field) and the progress, or nothing. */
export function drainInfo(drain: NodeDrain | undefined): { draining?: true; drain?: DrainStatus; waking?: number } {
  if (!drain) return {};
  if (drain.active) return { draining: true, drain: drain.status() };
  return drain.waking ? { waking: drain.waking } : {};
}

export function registerDrainRoutes(api: SandboxdApi, drain: NodeDrain, registry: Registry): void {
  new Gauge({
    name: 'sandboxd_draining',
    help: 'Whether the node is draining (1) or takes claims (0)',
    registers: [registry],
    collect() {
      this.set(drain.active ? 1 : 0);
    },
  });

  api.route('POST', '/v1/drain', async (req, res, who) => {
    requireOperator(who);
    const body = await readJson(req);
    const extra = Object.keys(body)[0];
    if (extra !== undefined)
      throw new SandboxError('sandboxd.bad-request', `body: unknown field "${extra}" (POST /v1/drain takes none)`);
    drain.start(API_REASON);
    json(res, 200, drainInfo(drain));
  });

  api.route('DELETE', '/v1/drain', async (_q, res, who) => {
    requireOperator(who);
    drain.stop(API_REASON);
    json(res, 200, { draining: drain.active, ...drainInfo(drain) });
  });
}
