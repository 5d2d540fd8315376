/**
 * The e2b control plane (`--e2b-listen`, plain HTTP): every endpoint the published SDKs call (docs/e2b.md has the
 * table), authenticated by `X-API-KEY`, answering with the shapes and statuses the SDKs accept (Python insists on
 * 201 for create, snapshot and fork). e2b sandboxes are the aggregated API's sandboxes in `--e2b-namespace`.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { MAX_FORK_COUNT, snapshotNameProblem } from '../../api/index.js';
import type { Logger } from '../../log/logger.js';
import { closeIfBodyPending, guardRequests } from '../../net/guard.js';
import { decodeSegments } from '../../net/path.js';
import { requestTarget } from '../../net/request-target.js';
import { listenOn } from '../../net/serve.js';
import type { Fleet } from '../sandboxes/fleet.js';
import type { SandboxdClient } from '../sandboxes/sandboxd-client.js';
import type { SandboxStorage } from '../sandboxes/storage.js';
import type { SandboxStore } from '../sandboxes/store.js';
import type { ApiKeys } from './api-keys.js';
import { E2bError, noContent, optionalBool, optionalInt, readJson, sendError, sendJson } from './http.js';
import { deleteSnapshot, listSandboxes, listSnapshots, listTemplates } from './queries.js';
import { DEFAULT_TIMEOUT_SECONDS, MAX_TIMEOUT_SECONDS, SandboxOps } from './sandbox-ops.js';
import type { TemplateAlias } from './templates.js';
import { detailView, sandboxView } from './views.js';

export interface E2bApiOptions {
  storage: SandboxStorage;
  store: SandboxStore;
  fleet: Fleet;
  client: SandboxdClient;
  keys: ApiKeys;
  templates: readonly TemplateAlias[];
  namespace: string;
  /** The sandbox domain the SDK builds `<port>-<id>.<domain>` from (omitted: the SDK's E2B_DOMAIN). */
  domain: string | undefined;
  logger: Logger;
}

type Handler = (req: IncomingMessage, res: ServerResponse, params: string[], url: URL) => Promise<void>;

export class E2bApi {
  readonly server: Server;
  private readonly ops: SandboxOps;
  private readonly routes: Array<{ method: string; pattern: RegExp; handler: Handler }> = [];

  constructor(private readonly o: E2bApiOptions) {
    this.ops = new SandboxOps({
      storage: o.storage,
      fleet: o.fleet,
      store: o.store,
      client: o.client,
      templates: new Map(o.templates.map((t) => [t.id, t])),
      namespace: o.namespace,
      log: o.logger,
    });
    this.define();
    this.server = createServer(
      { keepAliveTimeout: 90_000, headersTimeout: 10_000 },
      guardRequests(o.logger, 'e2b-api', (req, res) => this.handle(req, res)),
    );
  }

  listen(host: string, port: number): Promise<AddressInfo> {
    return listenOn(this.server, host, port);
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
  }

  private route(method: string, path: string, handler: Handler): void {
    this.routes.push({ method, pattern: new RegExp(`^${path.replace(/\{[a-z]+\}/g, '([^/]+)')}$`), handler });
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let path: string | undefined; // for the log: the target may be what failed
    try {
      const url = requestTarget(req, (message) => new E2bError(400, message));
      path = url.pathname;
      if (url.pathname === '/health' && req.method === 'GET') return noContent(res);
      if (!this.o.keys.allows(req.headers['x-api-key'])) throw new E2bError(401, 'invalid API key (X-API-KEY)');
      const match = this.routes.find((r) => r.method === req.method && r.pattern.test(url.pathname));
      if (!match) {
        const exists = this.routes.some((r) => r.pattern.test(url.pathname));
        throw new E2bError(
          exists ? 405 : 404,
          exists ? `method ${req.method} not allowed on ${url.pathname}` : `no endpoint ${url.pathname}`,
        );
      }
      const params = decodeSegments(
        (match.pattern.exec(url.pathname) ?? []).slice(1),
        () => new E2bError(400, 'malformed path'),
      );
      await match.handler(req, res, params, url);
    } catch (err) {
      const e = err instanceof E2bError ? err : new E2bError(500, (err as Error).message);
      if (e.status >= 500) this.o.logger.warn({ err, path }, 'e2b request failed');
      closeIfBodyPending(req, res);
      sendError(res, e);
    }
  }

  private define(): void {
    const ops = this.ops;
    const domain = this.o.domain;
    const create: Handler = async (req, res) => {
      const { entry, envdToken } = await ops.create(await readJson(req));
      sendJson(res, 201, sandboxView(entry, envdToken, domain));
    };
    this.route('POST', '/v2/sandboxes', create);
    this.route('POST', '/sandboxes', create);

    const list: Handler = async (_req, res, _p, url) => {
      const { items, nextToken } = listSandboxes(this.o.store, this.o.namespace, url.searchParams);
      sendJson(res, 200, items, nextToken ? { 'x-next-token': nextToken } : {});
    };
    this.route('GET', '/v2/sandboxes', list);
    this.route('GET', '/sandboxes', list);

    this.route('GET', '/sandboxes/{id}', async (_req, res, [id]) => {
      const { entry, envdToken } = await ops.refresh(ops.entry(id!));
      sendJson(res, 200, detailView(entry, envdToken, domain));
    });
    this.route('DELETE', '/sandboxes/{id}', async (_req, res, [id]) => {
      await ops.kill(id!);
      noContent(res);
    });
    this.route('POST', '/sandboxes/{id}/timeout', async (req, res, [id]) => {
      const body = await readJson(req);
      // 0 is e2b's "expire now": the sandbox ends (or, with autoPause, pauses) as at its lease's end.
      const t = optionalInt(body.timeout, 'timeout', 0, MAX_TIMEOUT_SECONDS);
      if (t === undefined) throw new E2bError(400, 'timeout: required (seconds)');
      await ops.setTimeout(ops.entry(id!), t);
      noContent(res);
    });
    this.route('POST', '/sandboxes/{id}/refreshes', async (req, res, [id]) => {
      const body = await readJson(req);
      const t = optionalInt(body.duration, 'duration', 1, MAX_TIMEOUT_SECONDS) ?? 60;
      await ops.setTimeout(ops.entry(id!), t);
      noContent(res);
    });
    this.route('POST', '/sandboxes/{id}/pause', async (req, res, [id]) => {
      const body = await readJson(req);
      // `memory: false` (JS keepMemory: false, Python mode="filesystem"): keep the files only.
      const memory = optionalBool(body.memory, 'memory');
      await ops.pause(id!, memory === false ? 'filesystem' : 'default');
      noContent(res);
    });
    const connect: Handler = async (req, res, [id]) => {
      const body = await readJson(req);
      // `memory: false` (onResume 'reboot'): resume from the files only, whichever way it was paused.
      const reboot = optionalBool(body.memory, 'memory') === false;
      const t = optionalInt(body.timeout, 'timeout', 0, MAX_TIMEOUT_SECONDS);
      const { resumed, entry, envdToken } = await ops.connect(id!, t, reboot);
      sendJson(res, resumed ? 201 : 200, sandboxView(entry, envdToken, domain));
    };
    this.route('POST', '/v2/sandboxes/{id}/connect', connect);
    this.route('POST', '/sandboxes/{id}/connect', connect);
    this.route('POST', '/sandboxes/{id}/resume', async (req, res, [id]) => {
      const body = await readJson(req);
      const t = optionalInt(body.timeout, 'timeout', 0, MAX_TIMEOUT_SECONDS);
      const { resumed, entry, envdToken } = await ops.connect(id!, t);
      if (!resumed) throw new E2bError(409, `sandbox "${id}" is already running`);
      sendJson(res, 201, sandboxView(entry, envdToken, domain));
    });
    this.route('GET', '/sandboxes/{id}/metrics', async (_req, res, [id], url) => {
      const bound = (name: string) => {
        const v = url.searchParams.get(name);
        if (v === null || v === '') return undefined;
        const n = Number(v);
        if (!Number.isInteger(n) || n < 0) throw new E2bError(400, `${name}: unix seconds, an integer`);
        return n;
      };
      const start = bound('start');
      const end = bound('end');
      const m = await ops.metrics(id!);
      const ts = String(m.timestamp);
      const unix = Math.floor(Date.parse(ts) / 1000);
      // The node measures now and keeps no history: the one sample is the answer when it is in [start, end], else
      // there is none (a range in the past has no samples here).
      if ((start !== undefined && unix < start) || (end !== undefined && unix > end)) {
        sendJson(res, 200, []);
        return;
      }
      sendJson(res, 200, [
        {
          timestamp: ts,
          timestampUnix: unix,
          cpuCount: m.cpu_count,
          cpuUsedPct: m.cpu_used_pct,
          memUsed: m.mem_used_bytes,
          memTotal: m.mem_total_bytes,
          memCache: m.mem_cache_bytes,
          diskUsed: m.disk_used_bytes,
          diskTotal: m.disk_total_bytes,
        },
      ]);
    });
    this.route('POST', '/sandboxes/{id}/fork', async (req, res, [id]) => {
      const body = await readJson(req);
      const count = optionalInt(body.count, 'count', 1, MAX_FORK_COUNT) ?? 1;
      const t = optionalInt(body.timeout, 'timeout', 0, MAX_TIMEOUT_SECONDS) || DEFAULT_TIMEOUT_SECONDS;
      const children = await ops.fork(id!, count, t);
      sendJson(
        res,
        201,
        children.map((c) => ({ sandbox: sandboxView(c.entry, c.envdToken, domain) })),
      );
    });
    this.route('POST', '/sandboxes/{id}/snapshots', async (req, res, [id]) => {
      const body = await readJson(req);
      const problem = body.name === undefined ? undefined : snapshotNameProblem(body.name);
      if (problem) throw new E2bError(400, `name: ${problem}`);
      const ck = await ops.snapshot(id!, body.name as string | undefined);
      sendJson(res, 201, { snapshotID: ck.id, names: ck.name ? [ck.name] : [] });
    });
    this.route('GET', '/snapshots', async (_req, res, _p, url) => {
      sendJson(
        res,
        200,
        await listSnapshots(this.o.fleet, this.o.client, this.o.store, this.o.namespace, url.searchParams),
      );
    });
    this.route('DELETE', '/templates/{id}', async (_req, res, [id]) => {
      if (!(await deleteSnapshot(this.o.fleet, this.o.client, this.o.store, this.o.namespace, id!)))
        throw new E2bError(404, `snapshot "${id}" not found`);
      noContent(res);
    });
    const templates: Handler = async (_req, res) =>
      sendJson(res, 200, listTemplates(this.o.store, this.o.namespace, this.o.templates));
    this.route('GET', '/templates', templates);
    this.route('GET', '/v2/templates', templates);
    this.route('PUT', '/sandboxes/{id}/network', async (req, res, [id]) => {
      await ops.updateNetwork(id!, await readJson(req));
      noContent(res);
    });
  }
}
