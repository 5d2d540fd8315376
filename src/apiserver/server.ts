/**
 * The HTTPS server of sandbox-apiserver and its request pipeline, in k8s.io/apiserver's order: health (no
 * credentials: kubelet probes send none) → authentication (front-proxy, client certs, tokens; 401) → request info
 * → authorization (SubjectAccessReview; 403) → discovery / OpenAPI / metrics / the resource's storage. Every
 * failure is a Status object; every request is counted by verb, resource and code.
 */
import { createServer, type Server } from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { SecureContextOptions } from 'node:tls';
import { Counter, Histogram, type Registry } from 'prom-client';
import type { Logger } from '../log/logger.js';
import { closeIfBodyPending, guardRequests, oneRequestAtATime } from '../net/guard.js';
import { HealthChecks } from './health.js';
import { BODY_DEADLINE_MS, sendStatus } from './http.js';
import { requestUrl } from './request-info.js';
import { handleResource, type RestStorage } from './resource-handler.js';
import { forbidden, pathNotFound, toStatusFailure, unauthorized } from './status.js';
import type { Authenticator, Authorizer, RequestInfo, UserInfo } from './types.js';

/** A non-resource route (discovery, OpenAPI): answers a GET/HEAD, or undefined when the path is not its own. */
export type DocumentRoute = (req: {
  url: string;
  accept: string | undefined;
  ifNoneMatch: string | undefined;
}) => { status: number; headers: Record<string, string>; body?: string } | undefined;

export interface ApiServerOptions {
  tls: SecureContextOptions;
  /** The delegated chain (front proxy, client certs, tokens; anonymous only when configured). */
  authenticator: Authenticator;
  authorizer: Authorizer;
  requestInfo(method: string, url: URL): RequestInfo;
  storages: ReadonlyMap<string, RestStorage<unknown>>;
  documents: readonly DocumentRoute[];
  health: HealthChecks;
  registry: Registry;
  logger: Logger;
  /** Connections open at once (`--max-connections`); past it new ones are closed at once. Default 4096. */
  maxConnections?: number;
}

export const DEFAULT_MAX_CONNECTIONS = 4096;

export class ApiServer {
  readonly server: Server;
  private readonly requests: Counter<string>;
  private readonly latency: Histogram<string>;
  private readonly watchStarts: Counter<string>;

  constructor(private readonly o: ApiServerOptions) {
    this.server = createServer(
      { ...o.tls, requestCert: true, rejectUnauthorized: false, minVersion: 'TLSv1.2', ALPNProtocols: ['http/1.1'] },
      // One request at a time per connection: pipelined requests cannot start reviews (or hold bodies) in parallel.
      oneRequestAtATime(guardRequests(o.logger, 'sandbox-apiserver', (req, res) => this.handle(req, res))),
    );
    this.server.keepAliveTimeout = 120_000;
    this.server.headersTimeout = 60_000;
    // Node's requestTimeout bounds receiving the request (headers and body), not the answer: a watch streams for as
    // long as it likes, a body sent a byte at a time is ended with 408 and the connection closed.
    this.server.requestTimeout = BODY_DEADLINE_MS + 5_000;
    this.server.maxConnections = o.maxConnections ?? DEFAULT_MAX_CONNECTIONS;
    this.requests = new Counter({
      name: 'apiserver_request_total',
      help: 'Requests served, by verb, resource, subresource and HTTP code',
      labelNames: ['verb', 'resource', 'subresource', 'code'],
      registers: [o.registry],
    });
    this.watchStarts = new Counter({
      name: 'sandbox_apiserver_watch_starts_total',
      help: 'Watches started, by client: system identities (controllers) by name, everyone else as "other"',
      labelNames: ['client'],
      registers: [o.registry],
    });
    this.latency = new Histogram({
      name: 'apiserver_request_duration_seconds',
      help: 'Time to the end of the response (watches excluded), by verb and resource',
      labelNames: ['verb', 'resource'],
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10],
      registers: [o.registry],
    });
  }

  listen(host: string, port: number): Promise<AddressInfo> {
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(port, host, () => resolve(this.server.address() as AddressInfo));
    });
  }

  /** New TLS connections use `tls` (a rotated serving cert, a reloaded client CA bundle); open ones keep theirs. */
  setSecureContext(tls: SecureContextOptions): void {
    this.server.setSecureContext({ ...tls });
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((r) => this.server.close(() => r()));
  }

  private async authenticate(req: IncomingMessage): Promise<UserInfo> {
    const r = await this.o.authenticator.authenticate(req);
    if (r === undefined) throw unauthorized();
    if ('failure' in r) throw unauthorized(r.failure);
    return r.user;
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const started = performance.now();
    let url: URL | undefined;
    let info: RequestInfo | undefined;
    try {
      url = requestUrl(req);
      if (this.o.health.handles(url.pathname)) return this.o.health.serve(url, res);
      const user = await this.authenticate(req);
      info = this.o.requestInfo(req.method ?? 'GET', url);
      const decision = await this.o.authorizer.authorize(user, info);
      if (!decision.allowed)
        throw forbidden(
          user.name,
          info.verb,
          info.isResourceRequest
            ? { group: info.apiGroup, resource: info.resource + (info.subresource ? `/${info.subresource}` : '') }
            : undefined,
          url.pathname,
          decision.reason,
        );
      await this.route(info, req, res, url, user.name);
      if (info.verb === 'watch' && res.statusCode === 200)
        this.watchStarts.inc({ client: watchClientLabel(user.name) });
    } catch (err) {
      const failure = toStatusFailure(err);
      if (failure.httpCode >= 500)
        this.o.logger.error({ err, path: url?.pathname, method: req.method }, 'request failed');
      closeIfBodyPending(req, res);
      sendStatus(res, failure);
    } finally {
      const verb = info?.verb ?? 'unknown';
      const { resource, subresource } = requestSeriesLabels(info, this.o.storages);
      const count = () => {
        this.requests.inc({ verb, resource, subresource, code: String(res.statusCode) });
        if (verb !== 'watch') this.latency.observe({ verb, resource }, (performance.now() - started) / 1000);
      };
      if (res.writableFinished) count();
      else res.once('finish', count).once('close', () => res.writableFinished || count());
    }
  }

  private async route(
    info: RequestInfo,
    req: IncomingMessage,
    res: ServerResponse,
    url: URL,
    user: string,
  ): Promise<void> {
    if (info.isResourceRequest) {
      const storage = this.o.storages.get(`${info.apiGroup}/${info.apiVersion}/${info.resource}`);
      if (!storage || (storage.descriptor.namespaced && !info.namespace && !['list', 'watch'].includes(info.verb)))
        throw pathNotFound(url.pathname);
      return handleResource(storage, info, req, res, url, user);
    }
    if (url.pathname === '/metrics' && req.method === 'GET') {
      const body = await this.o.registry.metrics();
      res.writeHead(200, { 'content-type': this.o.registry.contentType });
      res.end(body);
      return;
    }
    if (req.method === 'GET' || req.method === 'HEAD') {
      for (const route of this.o.documents) {
        const doc = route({
          url: req.url ?? '/',
          accept: req.headers.accept,
          ifNoneMatch: req.headers['if-none-match'],
        });
        if (!doc) continue;
        res.writeHead(doc.status, doc.headers);
        res.end(req.method === 'HEAD' ? undefined : doc.body);
        return;
      }
    }
    throw pathNotFound(url.pathname);
  }
}

/**
 * The `client` label of a watch start: a `system:` component by name (a fixed set: the controller-manager, the
 * garbage collector's informers...), every ServiceAccount as one value (there is one name per account, without
 * bound), anyone else as `other`.
 */
export function watchClientLabel(user: string): string {
  if (user.startsWith('system:serviceaccount:')) return 'system:serviceaccount';
  return user.startsWith('system:') ? user : 'other';
}

/**
 * The resource and subresource labels of a request's series: what the URL names only when this server serves it,
 * else `unknown`. The URL is the caller's, and denied or unknown paths are counted too, so labelling them as given
 * would let any client (even one with no RBAC) add series without bound.
 */
export function requestSeriesLabels(
  info: RequestInfo | undefined,
  storages: ApiServerOptions['storages'],
): { resource: string; subresource: string } {
  if (!info?.isResourceRequest) return { resource: '', subresource: '' };
  const sub = info.subresource ?? '';
  const storage = storages.get(`${info.apiGroup}/${info.apiVersion}/${info.resource}`);
  if (!storage) return { resource: 'unknown', subresource: sub && 'unknown' };
  return {
    resource: info.resource,
    subresource: sub && (storage.descriptor.subresources.some((s) => s.name === sub) ? sub : 'unknown'),
  };
}
