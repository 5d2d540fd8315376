import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { httpErrorOf } from '../error-http.js';
import { SandboxError } from '../errors.js';
import { silentLogger, type Logger } from '../log/logger.js';
import {
  assertMayGiveObjects,
  identify,
  isOperator,
  mayAccessSandbox,
  tenantOf,
  type AuthConfig,
  type Principal,
} from './auth.js';
import type { NodeEngine, SandboxRecord } from './engine.js';
import type { ExpiryAction, GatewayDeliveryFact } from './claims.js';
import { MAX_EXEC_TIMEOUT_SECONDS } from '../api/index.js';
import { MAX_IDLE_HIBERNATE_SECONDS } from '../api/keys.js';
import { collectBody } from '../net/body.js';
import { guardRequests } from '../net/guard.js';
import { decodeSegments } from '../net/path.js';
import { requestTarget } from '../net/request-target.js';
import { ChangeFeed, sandboxRow } from './change-feed.js';
import { claimNetworkPolicy } from './network-policy.js';
import { registerLifecycleRoutes, type PauseMode } from './lifecycle-routes.js';
import { drainInfo, registerDrainRoutes } from './drain-routes.js';
import type { NodeDrain } from './drain.js';
import type { PeerDirectory } from './peers.js';
import { checkpointRow, registerCheckpointRoutes, type PlacementOptions } from './placement/routes.js';
import { parsePoolKey } from './pool-key.js';
import { vmMetrics } from './sandbox-metrics.js';
import { engineKind } from '../vmm/index.js';

/**
 * sandboxd's HTTP API (docs/sandboxd-api.md): plain HTTP/1.1 + JSON, bearer tokens, `{"error": "..."}` on every
 * non-2xx, request bodies capped at 1 MiB. Handlers only parse and authorize; the engine does the work, and the
 * table of error codes (src/error-codes.ts) gives each error's HTTP status.
 */

export const MAX_BODY_BYTES = 1 << 20;
const MAX_OBJECT_BYTES = 256 << 10;

/** The HTTP status and message for an error thrown by a handler (both listeners): src/error-codes.ts has the statuses. */
export function errorStatus(err: unknown): { status: number; message: string; code?: string } {
  const { status } = httpErrorOf('sandboxd', err);
  const message = err instanceof SandboxError ? err.describe() : err instanceof Error ? err.message : String(err);
  return { status, message, ...(err instanceof SandboxError && status < 500 ? { code: err.code } : {}) };
}

export interface ApiServerOptions {
  /** What "pause" does on this node: freeze in memory (default) or hibernate to disk. */
  pauseMode?: PauseMode;
  engine: NodeEngine;
  auth: AuthConfig;
  peers?: PeerDirectory;
  /** Where this node's data plane (envd) is reached, reported in GET /v1/info for the e2b router. */
  envdAddr?: string;
  /** Checkpoint placement across nodes (owner probes, peer heal); without it checkpoints are served locally only. */
  placement?: PlacementOptions;
  /** The node's drain (drain.ts): its routes (`POST|DELETE /v1/drain`) and its progress in `GET /v1/info`. */
  drain?: NodeDrain;
  logger?: Logger;
  registry?: Registry;
}

export type Route = (
  req: IncomingMessage,
  res: ServerResponse,
  who: Principal,
  params: string[],
  url: URL,
) => Promise<void>;

export class SandboxdApi {
  readonly server: Server;
  readonly registry: Registry;
  private readonly engine: NodeEngine;
  private readonly feed: ChangeFeed;
  private readonly log: Logger;
  private readonly routes: Array<{ method: string; pattern: RegExp; handler: Route; public?: boolean }> = [];
  private readonly metrics;
  /** Label children bound once: resolving labels per claim costs more than the rest of a warm claim's bookkeeping. */
  private readonly claimTiers;

  constructor(private readonly opts: ApiServerOptions) {
    this.engine = opts.engine;
    this.feed = new ChangeFeed(opts.engine);
    this.log = opts.logger ?? silentLogger;
    this.registry = opts.registry ?? new Registry();
    opts.engine.idle.register(this.registry);
    const r = [this.registry];
    /** `sim` on a simulated node (sandboxd --engine=sim): every series says whether real VMs stand behind it. */
    const engine = engineKind(opts.engine.driver);
    this.metrics = {
      claims: new Counter({
        name: 'sandboxd_claims_total',
        help: 'Claims served, by tier (warm|provisioned)',
        labelNames: ['tier'],
        registers: r,
      }),
      claimSeconds: new Histogram({
        name: 'sandboxd_claim_seconds',
        help: 'Claim handling time inside sandboxd',
        labelNames: ['tier'],
        buckets: [0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.005, 0.025, 0.1, 0.5, 2],
        registers: r,
      }),
      // every release (this API, a lease that ended, the claim gateway's release of a claim that is gone)
      releases: new Counter({ name: 'sandboxd_releases_total', help: 'Sandboxes released', registers: r }),
      requests: new Counter({
        name: 'sandboxd_http_requests_total',
        help: 'HTTP requests by route and status',
        labelNames: ['route', 'code'],
        registers: r,
      }),
    };
    opts.engine.on('released', () => this.metrics.releases.inc());
    // A lease-end action (on_expiry) that failed; the sandbox was released instead (engine.ts, the reaper).
    const expiryFailures = new Counter({
      name: 'sandboxd_expiry_action_failures_total',
      help: 'Lease-end actions (on_expiry) that failed, each ended in a release instead, by action',
      labelNames: ['action'],
      registers: r,
    });
    opts.engine.on('expiry-failed', (_rec: unknown, action: string) => expiryFailures.inc({ action }));
    this.claimTiers = {
      warm: { count: this.metrics.claims.labels('warm'), seconds: this.metrics.claimSeconds.labels('warm') },
      provisioned: {
        count: this.metrics.claims.labels('provisioned'),
        seconds: this.metrics.claimSeconds.labels('provisioned'),
      },
    };
    new Gauge({
      name: 'sandboxd_pool_warm',
      help: 'Warm VMs per pool',
      labelNames: ['engine', 'template', 'net', 'size'],
      registers: r,
      collect() {
        this.reset();
        for (const p of opts.engine.poolStatus())
          this.set({ engine, template: p.key.template, net: p.key.net, size: p.key.size }, p.warm);
      },
    });
    new Gauge({
      name: 'sandboxd_pool_target',
      help: 'Warm target per pool',
      labelNames: ['engine', 'template', 'net', 'size'],
      registers: r,
      collect() {
        this.reset();
        for (const p of opts.engine.poolStatus())
          this.set({ engine, template: p.key.template, net: p.key.net, size: p.key.size }, p.target);
      },
    });
    new Gauge({
      name: 'sandboxd_claimed',
      help: 'Claimed sandboxes',
      labelNames: ['engine'],
      registers: r,
      collect() {
        this.set({ engine }, opts.engine.claimedCount);
      },
    });
    this.defineRoutes();
    registerCheckpointRoutes(this, this.engine, this.registry, this.log, opts.placement);
    if (opts.drain) registerDrainRoutes(this, opts.drain, this.registry);
    this.server = createServer(
      { keepAliveTimeout: 90_000 },
      guardRequests(this.log, 'sandboxd-api', (req, res) => this.handle(req, res)),
    );
  }

  listen(host: string, port: number): Promise<AddressInfo> {
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(port, host, () => resolve(this.server.address() as AddressInfo));
    });
  }

  close(): Promise<void> {
    this.feed.close();
    this.server.closeAllConnections();
    return new Promise((r) => this.server.close(() => r()));
  }

  /** Add a route (the route modules beside this file register theirs through it). */
  route(method: string, path: string, handler: Route, isPublic = false) {
    const pattern = new RegExp(`^${path.replace(/\{[a-z]+\}/g, '([^/]+)')}$`);
    this.routes.push({ method, pattern, handler, public: isPublic });
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let path: string | undefined; // for the log: the target may be what failed
    let routeName = 'unknown';
    try {
      const url = requestTarget(req, (message) => new SandboxError('sandboxd.bad-request', message));
      path = url.pathname;
      const match = this.routes.find((r) => r.method === req.method && r.pattern.test(url.pathname));
      if (!match) {
        const pathExists = this.routes.some((r) => r.pattern.test(url.pathname));
        throw new SandboxError(
          pathExists ? 'sandboxd.method-not-allowed' : 'sandboxd.not-found',
          pathExists ? `method ${req.method} not allowed on ${url.pathname}` : `no route ${url.pathname}`,
        );
      }
      routeName = match.pattern.source;
      const params = decodeSegments(
        (match.pattern.exec(url.pathname) ?? []).slice(1),
        (message) => new SandboxError('sandboxd.bad-request', message),
      );
      let who: Principal | undefined = { kind: 'anonymous' };
      if (!match.public) {
        who = identify(req.headers.authorization, this.opts.auth);
        if (!who) throw new SandboxError('sandboxd.unauthorized', 'invalid api token');
      }
      await match.handler(req, res, who, params, url);
    } catch (err) {
      const { status, message, code } = errorStatus(err);
      if (status >= 500) this.log.error({ err, path }, 'request failed');
      if (!res.headersSent) json(res, status, { error: message, ...(code ? { code } : {}) });
      else res.end();
    } finally {
      this.metrics.requests.inc({ route: routeName, code: String(res.statusCode) });
    }
  }

  /**
   * POST /v1/claim, for both listeners (this API and the claim gateway): the JSON answer for `body`, or an error
   * (a SandboxError, mapped by errorStatus). `t0` is when the request started, for the histogram.
   */
  async claim(who: Principal, body: Record<string, unknown>, t0 = performance.now()): Promise<unknown> {
    const r = this.claimNow(who, body, t0);
    return 'answer' in r ? r.answer : r.pending;
  }

  /**
   * claim() without a promise hop when none is needed: a redirect or an error (thrown) is decided in this tick, so
   * the claim gateway can answer from its socket's data callback. A claim is `pending`: the VM is taken in this tick,
   * but the answer waits until the claim is on disk (NodeEngine.durable: a claim handed out survives a crash).
   */
  claimNow(
    who: Principal,
    body: Record<string, unknown>,
    t0: number,
    gatewayDelivery?: GatewayDeliveryFact,
  ): { answer: unknown } | { pending: Promise<unknown> } {
    if (who.kind === 'bearer') throw new SandboxError('sandboxd.unauthorized', 'invalid api token');
    const e = this.engine;
    const key = parsePoolKey(body);
    const ttl = optionalInt(body.ttl_seconds, 'ttl_seconds', 0);
    const claimRef = optionalString(body.claim_ref, 'claim_ref');
    const onExpiry = onExpiryOf(body);
    const idleHibernateSeconds = idleSecondsOf(body);
    const noRedirect = body.no_redirect === true;
    const object = storedObject(body.object, claimRef);
    // sandbox-apiserver serves an object where it says it lives: only the fleet's root (sandbox-apiserver itself)
    // and this node's own claim gateway (which wrote it, after RBAC) may say that.
    if (object !== undefined && !gatewayDelivery) assertMayGiveObjects(who, 'object');
    // Checked before anything is taken: a bad policy claims nothing (network-policy.ts says who may give what).
    const network = claimNetworkPolicy(body.network, who, key, gatewayDelivery !== undefined);
    e.assertKnownTemplate(key.template);
    // A Kubernetes object's name is unique among live claims and claims being made (the engine holds the ref from
    // before its clone's await): the second create of one name spends no VM and is never redirected.
    if (object !== undefined) e.assertClaimRefFree(claimRef!);
    if (!noRedirect && e.warmCount(key) === 0) {
      const peers = this.opts.peers?.withWarm(key) ?? [];
      if (peers.length) return { answer: { redirect: peers.slice(0, 3) } };
    }
    if (!e.hasRoom()) {
      const peers = this.opts.peers?.withWarm(key) ?? [];
      if (!noRedirect && peers.length) return { answer: { redirect: peers.slice(0, 3) } };
      throw new SandboxError('sandboxd.at-capacity', `node at capacity (${e.maxClaims} claims)`);
    }
    const req = {
      key,
      ttlSeconds: ttl,
      claimRef,
      tenant: tenantOf(who),
      object,
      ...(onExpiry ? { onExpiry } : {}),
      ...(idleHibernateSeconds ? { idleHibernateSeconds } : {}),
      ...(gatewayDelivery ? { gatewayDelivery } : {}),
      ...(network ? { network } : {}),
      provisionOnMiss: body.warm_only !== true,
    };
    return { pending: e.claim(req).then((rec) => this.claimed(rec, t0)) };
  }

  /** The answer to a claim; its metrics are recorded once the current tick (which writes the answer) is done. */
  private claimed(rec: SandboxRecord, t0: number): unknown {
    const tier = this.claimTiers[rec.source === 'warm' ? 'warm' : 'provisioned'];
    const seconds = (performance.now() - t0) / 1000;
    queueMicrotask(() => {
      tier.count.inc();
      tier.seconds.observe(seconds);
    });
    // A claim with its Kubernetes object (sandbox-apiserver's create) also gets the row, so the caller can index it.
    if (rec.object !== undefined) return { ...claimResponse(rec, this.engine.advertiseAddr), sandbox: sandboxRow(rec) };
    return claimResponse(rec, this.engine.advertiseAddr);
  }

  /** Count a request answered by the claim gateway (same series as this API's, route `gateway`). */
  countGatewayRequest(code: number): void {
    this.metrics.requests.inc({ route: 'gateway', code: String(code) });
  }

  private defineRoutes(): void {
    const e = this.engine;
    this.route('GET', '/healthz', async (_q, res) => text(res, 200, 'ok'), true);
    this.route('GET', '/metrics', async (_q, res, who) => {
      requireOperator(who);
      text(res, 200, await this.registry.metrics(), this.registry.contentType);
    });

    this.route('POST', '/v1/claim', async (req, res, who) => {
      const t0 = performance.now();
      json(res, 200, await this.claim(who, await readJson(req), t0));
    });

    this.route('PUT', '/v1/pools', async (req, res, who, _p, url) => {
      requireOperator(who);
      const body = await readJson(req);
      strictKeys(body, ['pools'], 'body');
      if (!Array.isArray(body.pools)) throw new SandboxError('sandboxd.bad-request', 'pools: must be an array');
      const targets = body.pools.map((p: unknown, i: number) => {
        if (!isObject(p)) throw new SandboxError('sandboxd.bad-request', `pools[${i}]: must be an object`);
        strictKeys(p, ['template', 'net', 'size', 'warm', 'engine'], `pools[${i}]`);
        const warm = optionalInt(p.warm, `pools[${i}].warm`, 0) ?? 0;
        return { key: parsePoolKey(p), warm };
      });
      const owner = url.searchParams.get('owner') ?? undefined;
      if (owner !== undefined && !/^[a-z0-9][a-z0-9.-]{0,62}$/.test(owner))
        throw new SandboxError(
          'sandboxd.bad-request',
          `owner: must be a lowercase name (got ${JSON.stringify(owner)})`,
        );
      e.setTargets(targets, owner);
      json(res, 200, this.info());
    });

    this.route('GET', '/v1/info', async (_q, res, who) => {
      requireOperator(who);
      json(res, 200, this.info());
    });

    this.route('GET', '/v1/sandboxes', async (_q, res, who, _p, url) => {
      if (url.searchParams.get('watch') === '1' || url.searchParams.get('watch') === 'true') {
        requireOperator(who);
        return this.feed.serve(res);
      }
      if (!isOperator(who) && who.kind !== 'tenant')
        throw new SandboxError('sandboxd.unauthorized', 'invalid api token');
      const claimRef = url.searchParams.get('claim_ref') ?? undefined;
      json(res, 200, { sandboxes: e.list({ claimRef, tenant: tenantOf(who) }).map((r) => sandboxRow(r)) });
    });

    this.route('GET', '/v1/sandboxes/{id}', async (_q, res, who, [id]) => {
      requireOperator(who);
      const rec = this.sandbox(id!);
      json(res, 200, { ...sandboxRow(rec), token: rec.token });
    });

    this.route('GET', '/v1/sandboxes/{id}/stats', async (_q, res, who, [id]) => {
      requireOperator(who);
      const rec = this.sandbox(id!);
      const vm = e.vm(rec.id);
      const s = await vm.stats();
      json(res, 200, {
        id: rec.id,
        cpu_count: vm.record.vcpus,
        mem_total_bytes: vm.record.memoryMiB * 1024 * 1024,
        mem_used_bytes: (s.rssKiB ?? 0) * 1024,
        mem_used_measured: s.rssKiB !== undefined && !rec.hibernated,
        hibernated: rec.hibernated,
        measured_at: new Date().toISOString(),
      });
    });

    this.route('GET', '/v1/sandboxes/{id}/metrics', async (_q, res, who, [id]) => {
      requireOperator(who);
      json(res, 200, await vmMetrics(e, this.sandbox(id!)));
    });

    this.route('POST', '/v1/sandboxes/{id}/release', async (_q, res, who, [id]) => {
      const rec = e.get(id!);
      if (!rec || !mayAccessSandbox(who, rec.token))
        throw new SandboxError('sandboxd.not-found', `sandbox ${id} not found`);
      await e.release(rec.id);
      res.writeHead(204).end();
    });

    this.route('POST', '/v1/sandboxes/{id}/renew', async (req, res, who, [id]) => {
      const rec = this.authorizedSandbox(who, id!);
      const body = await readJson(req);
      // 0: the lease ends now (e2b's setTimeout(0)); the reaper then does what the lease's end does.
      const ttl = optionalInt(body.ttl_seconds, 'ttl_seconds', 0);
      if (ttl === undefined) throw new SandboxError('sandboxd.bad-request', 'ttl_seconds: required');
      json(res, 200, { deadline: e.renew(rec.id, ttl).deadline });
    });

    for (const verb of ['hibernate', 'wake'] as const) {
      this.route('POST', `/v1/sandboxes/{id}/${verb}`, async (_q, res, who, [id]) => {
        const rec = this.authorizedSandbox(who, id!);
        await (verb === 'hibernate' ? e.hibernate(rec.id) : e.wake(rec.id));
        res.writeHead(204).end();
      });
    }

    this.route('POST', '/v1/sandboxes/{id}/checkpoint', async (req, res, who, [id]) => {
      const body = await readJson(req);
      const rec = this.authorizedSandbox(who, id!, optionalString(body.token, 'token'));
      await e.idle.ensureAwake(rec.id);
      const ck = await e.checkpoint(rec.id, optionalString(body.name, 'name'));
      json(res, 200, { checkpoint: checkpointRow(ck) });
    });

    this.route('POST', '/v1/sandboxes/{id}/exec', async (req, res, who, [id]) => {
      const rec = this.authorizedSandbox(who, id!);
      const body = await readJson(req);
      // An idle-suspended sandbox is woken for the command (the caller waits); one a caller paused stays paused.
      await e.idle.ensureAwake(rec.id);
      if (rec.paused || rec.hibernated)
        throw new SandboxError(
          'sandboxd.conflict',
          `sandbox ${rec.id} is ${rec.paused ? 'paused' : 'hibernated'}: resume it first`,
        );
      if (
        !Array.isArray(body.argv) ||
        body.argv.length === 0 ||
        !body.argv.every((a: unknown) => typeof a === 'string')
      )
        throw new SandboxError('sandboxd.bad-request', 'argv: must be a non-empty array of strings');
      const timeout = optionalInt(body.timeout_seconds, 'timeout_seconds', 1, MAX_EXEC_TIMEOUT_SECONDS);
      const env = isObject(body.env) ? (body.env as Record<string, string>) : undefined;
      const done = e.idle.hold(rec.id);
      const result = await e
        .vm(rec.id)
        .run(body.argv as string[], {
          cwd: optionalString(body.cwd, 'cwd'),
          env,
          timeoutMs: timeout ? timeout * 1000 : 60_000,
          maxOutputBytes: 4 << 20,
        })
        .finally(done);
      json(res, 200, {
        exit_code: result.exitCode,
        stdout: result.stdout.toString('utf8'),
        stderr: result.stderr.toString('utf8'),
      });
    });

    registerLifecycleRoutes(this, e, this.opts.pauseMode);
  }

  info() {
    const e = this.engine;
    const claims = e.list();
    const sim = e.driver.simulation;
    return {
      engine: engineKind(e.driver),
      ...(sim ? { simulation: { note: sim.note, clone_ms: sim.cloneMs } } : {}),
      pools: e.poolStatus().map((p) => ({
        key: p.key,
        ...(p.owner ? { owner: p.owner } : {}),
        warm: p.warm,
        primed: p.primed,
        refilling: p.refilling,
        target: p.target,
        golden: p.golden,
      })),
      claimed: claims.length,
      hibernated: claims.filter((c) => c.hibernated).length,
      archived: 0,
      ...(!e.hasRoom() ? { at_capacity: true, at_capacity_reason: `max_claims ${e.maxClaims} reached` } : {}),
      peers: this.opts.peers?.addresses() ?? [],
      ...(this.opts.envdAddr ? { envd_addr: this.opts.envdAddr } : {}),
      ...drainInfo(this.opts.drain),
    };
  }

  private sandbox(id: string): SandboxRecord {
    const rec = this.engine.get(id);
    if (!rec) throw new SandboxError('sandboxd.not-found', `sandbox ${id} not found`);
    return rec;
  }

  /** Root (operator path, resolves by id alone) or the sandbox's own token (header or body). */
  authorizedSandbox(who: Principal, id: string, bodyToken?: string): SandboxRecord {
    const rec = this.engine.get(id);
    if (!rec || !mayAccessSandbox(who, rec.token, bodyToken)) {
      if (who.kind === 'tenant' && rec) throw new SandboxError('sandboxd.forbidden', 'operator token required');
      throw new SandboxError('sandboxd.not-found', `sandbox ${id} not found`);
    }
    return rec;
  }
}

export function requireOperator(who: Principal): void {
  if (who.kind === 'tenant') throw new SandboxError('sandboxd.forbidden', 'operator token required');
  if (!isOperator(who)) throw new SandboxError('sandboxd.unauthorized', 'invalid api token');
}

export function claimResponse(rec: SandboxRecord, ownerAddr: string) {
  return {
    id: rec.id,
    token: rec.token,
    deadline: rec.deadline,
    owner_addr: ownerAddr,
    ...(rec.fromCheckpoint ? { from_checkpoint: rec.fromCheckpoint } : {}),
  };
}

/**
 * The `object` of a claim (a Kubernetes object's identity and spec, docs/sandboxd-api.md): a JSON object naming
 * `metadata.namespace/name` equal to the claim_ref, at most 256 KiB; absent for claims that are not objects.
 */
export function storedObject(v: unknown, claimRef: string | undefined): unknown {
  if (v === undefined || v === null) return undefined;
  const meta = isObject(v) && isObject(v.metadata) ? v.metadata : undefined;
  if (!meta || typeof meta.name !== 'string' || typeof meta.namespace !== 'string')
    throw new SandboxError(
      'sandboxd.bad-request',
      'object: must be an object with metadata.name and metadata.namespace',
    );
  if (claimRef !== `${meta.namespace}/${meta.name}`)
    throw new SandboxError(
      'sandboxd.bad-request',
      `object: claim_ref must be "${meta.namespace}/${meta.name}" for this object`,
    );
  if (Buffer.byteLength(JSON.stringify(v)) > MAX_OBJECT_BYTES)
    throw new SandboxError('sandboxd.bad-request', `object: larger than ${MAX_OBJECT_BYTES} bytes`);
  return v;
}

export function json(res: ServerResponse, status: number, body: unknown): void {
  const payload = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) });
  res.end(payload);
}

function text(res: ServerResponse, status: number, body: string, type = 'text/plain'): void {
  res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** The request body as a JSON object (400 on malformed or oversized bodies). */
export async function readJson(req: IncomingMessage): Promise<Record<string, unknown>> {
  const tooLarge = () =>
    new SandboxError('sandboxd.bad-request', `invalid request body: larger than ${MAX_BODY_BYTES} bytes`);
  return parseJsonBody(await collectBody(req, MAX_BODY_BYTES, tooLarge));
}

/** A claim body's `on_expiry`: an ExpiryAction, or undefined for release (the default); 400 for anything else. */
export function onExpiryOf(body: Record<string, unknown>): ExpiryAction | undefined {
  const v = optionalString(body.on_expiry, 'on_expiry');
  if (v !== undefined && v !== 'release' && v !== 'hibernate' && v !== 'pause-filesystem')
    throw new SandboxError('sandboxd.bad-request', 'on_expiry: must be release, hibernate or pause-filesystem');
  return v === 'hibernate' || v === 'pause-filesystem' ? v : undefined;
}

/** A claim body's `idle_hibernate_seconds` (the idle policy, idle.ts): undefined or 0 for none; 400 out of range. */
export function idleSecondsOf(body: Record<string, unknown>): number | undefined {
  return optionalInt(body.idle_hibernate_seconds, 'idle_hibernate_seconds', 0, MAX_IDLE_HIBERNATE_SECONDS) || undefined;
}

/** A request body (already size-capped) as a JSON object: `{}` when empty, 400 naming the problem otherwise. */
export function parseJsonBody(chunks: readonly Buffer[]): Record<string, unknown> {
  if (!chunks.some((c) => c.length > 0)) return {};
  try {
    const v = JSON.parse((chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)).toString('utf8')) as unknown;
    if (!isObject(v)) throw new Error('not an object');
    return v;
  } catch (err) {
    throw new SandboxError('sandboxd.bad-request', `invalid request body: ${(err as Error).message}`);
  }
}

function strictKeys(obj: Record<string, unknown>, allowed: string[], where: string): void {
  for (const k of Object.keys(obj))
    if (!allowed.includes(k)) throw new SandboxError('sandboxd.bad-request', `${where}: unknown field "${k}"`);
}

export function optionalInt(v: unknown, field: string, min: number, max?: number): number | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || (max !== undefined && v > max))
    throw new SandboxError(
      'sandboxd.bad-request',
      `${field}: must be an integer >= ${min}${max !== undefined ? ` and <= ${max}` : ''}`,
    );
  return v;
}

export function optionalString(v: unknown, field: string): string | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string') throw new SandboxError('sandboxd.bad-request', `${field}: must be a string`);
  return v;
}
