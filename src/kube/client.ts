import { Agent, request as httpsRequest, type RequestOptions } from 'node:https';
import { request as httpRequest, Agent as HttpAgent } from 'node:http';
import { KubeConfig } from '@kubernetes/client-node';
import { Counter, Histogram, type Registry } from 'prom-client';
import { SandboxError } from '../errors.js';
import { StatusError } from './status-errors.js';
import { collectionPath, objectPath, type KubeObject, type ResourceType } from './resource.js';
import { TokenBucket } from './token-bucket.js';

/**
 * A small, fast Kubernetes REST client on node:https with keep-alive. @kubernetes/client-node supplies the
 * kubeconfig handling (auth plugins, certs, tokens); the request path is ours because claims are latency
 * critical (one pooled connection, no per-call object churn) and we need every verb controllers use: typed
 * merge/JSON/apply patches with field managers, resourceVersion preconditions, and resumable watches.
 */

export type PatchType = 'merge' | 'json' | 'strategic' | 'apply';
const PATCH_CONTENT_TYPES: Record<PatchType, string> = {
  merge: 'application/merge-patch+json',
  json: 'application/json-patch+json',
  strategic: 'application/strategic-merge-patch+json',
  apply: 'application/apply-patch+yaml',
};

export interface ClientOptions {
  /** Client-side rate limit; negative disables it (like --kube-api-qps=-1). */
  qps?: number;
  burst?: number;
  userAgent?: string;
  registry?: Registry;
  /** Default per-request timeout (not for watches). */
  timeoutMs?: number;
}

export interface ListOptions {
  labelSelector?: string;
  fieldSelector?: string;
  limit?: number;
  continue?: string;
  resourceVersion?: string;
}

export interface WatchOptions {
  labelSelector?: string;
  fieldSelector?: string;
  resourceVersion?: string;
  allowWatchBookmarks?: boolean;
  timeoutSeconds?: number;
}

export interface WatchEvent<T> {
  type: 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';
  object: T;
}

export interface KubeList<T> {
  apiVersion?: string;
  kind?: string;
  metadata: { resourceVersion?: string; continue?: string };
  items: T[];
}

/** Per-call options of every verb. */
export interface CallOptions {
  /** Aborts the request (and a wait for the rate limiter); the call rejects with kube.aborted. */
  signal?: AbortSignal;
}

export interface WriteOptions extends CallOptions {
  fieldManager?: string;
  dryRun?: boolean;
}

export interface DeleteOptions {
  propagationPolicy?: 'Foreground' | 'Background' | 'Orphan';
  gracePeriodSeconds?: number;
  preconditions?: { uid?: string; resourceVersion?: string };
}

interface RequestSpec {
  verb: string;
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  path: string;
  resource: string;
  query?: Record<string, string | number | boolean | undefined>;
  body?: unknown;
  contentType?: string;
  timeoutMs?: number;
  signal?: AbortSignal | undefined;
}

let metricsFor = new WeakMap<Registry, { requests: Counter<string>; latency: Histogram<string> }>();

function clientMetrics(registry: Registry | undefined) {
  if (!registry) return undefined;
  let m = metricsFor.get(registry);
  if (!m) {
    m = {
      requests: new Counter({
        name: 'rest_client_requests_total',
        help: 'Kubernetes API requests made by this process, by verb, resource and HTTP code',
        labelNames: ['verb', 'resource', 'code'],
        registers: [registry],
      }),
      latency: new Histogram({
        name: 'rest_client_request_duration_seconds',
        help: 'Kubernetes API request latency (non-watch), by verb',
        labelNames: ['verb'],
        buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
        registers: [registry],
      }),
    };
    metricsFor.set(registry, m);
  }
  return m;
}

/** Forget cached metric objects (tests create many registries). */
export function resetClientMetricsCache(): void {
  metricsFor = new WeakMap();
}

export class KubeClient {
  private readonly base: URL;
  private readonly tls: RequestOptions;
  private readonly agent: Agent | HttpAgent;
  private readonly limiter: TokenBucket | undefined;
  private readonly metrics: ReturnType<typeof clientMetrics>;
  readonly userAgent: string;
  private readonly timeoutMs: number;
  private readonly opts: ClientOptions;

  private constructor(server: string, tls: RequestOptions, opts: ClientOptions) {
    this.base = new URL(server);
    this.opts = opts;
    this.tls = tls;
    const agentOpts = { keepAlive: true, maxSockets: 256, maxFreeSockets: 64 };
    const { ca, cert, key, pfx, passphrase, rejectUnauthorized, servername } = tls;
    this.agent =
      this.base.protocol === 'https:'
        ? new Agent({ ...agentOpts, ca, cert, key, pfx, passphrase, rejectUnauthorized, servername })
        : new HttpAgent(agentOpts);
    const qps = opts.qps ?? 200;
    this.limiter = qps > 0 ? new TokenBucket(qps, Math.max(1, opts.burst ?? 400)) : undefined;
    this.metrics = clientMetrics(opts.registry);
    this.userAgent = opts.userAgent ?? 'sandbox-operator';
    this.timeoutMs = opts.timeoutMs ?? 30_000;
  }

  static async fromKubeconfig(
    kubeconfig: string | KubeConfig | undefined,
    opts: ClientOptions = {},
  ): Promise<KubeClient> {
    let kc: KubeConfig;
    if (kubeconfig instanceof KubeConfig) kc = kubeconfig;
    else {
      kc = new KubeConfig();
      if (kubeconfig) kc.loadFromFile(kubeconfig);
      else kc.loadFromDefault();
    }
    const cluster = kc.getCurrentCluster();
    if (!cluster)
      throw new SandboxError('kube.config', 'the kubeconfig names no current cluster', {
        hint: 'pass --kubeconfig or set KUBECONFIG',
      });
    const tls: RequestOptions = {};
    await kc.applyToHTTPSOptions(tls);
    return new KubeClient(cluster.server, tls, opts);
  }

  get server(): string {
    return this.base.origin;
  }

  /**
   * A client for the same server and credentials with its own connection pool, rate limiter and options (e.g.
   * leader election's: unthrottled, so renewals never queue behind the controllers' requests).
   */
  derive(opts: ClientOptions): KubeClient {
    return new KubeClient(this.base.href, this.tls, { ...this.opts, ...opts });
  }

  close(): void {
    this.agent.destroy();
  }

  async get<T extends KubeObject>(
    rt: ResourceType,
    namespace: string | undefined,
    name: string,
    subresource?: string,
    opts: CallOptions = {},
  ): Promise<T> {
    return this.call<T>({
      verb: 'get',
      method: 'GET',
      path: objectPath(rt, namespace, name, subresource),
      resource: rt.plural,
      signal: opts.signal,
    });
  }

  async list<T extends KubeObject>(rt: ResourceType, namespace?: string, opts: ListOptions = {}): Promise<KubeList<T>> {
    return this.call<KubeList<T>>({
      verb: 'list',
      method: 'GET',
      path: collectionPath(rt, namespace),
      resource: rt.plural,
      query: { ...opts },
    });
  }

  async create<T extends KubeObject>(rt: ResourceType, obj: T, opts: WriteOptions = {}): Promise<T> {
    return this.call<T>({
      verb: 'create',
      method: 'POST',
      path: collectionPath(rt, obj.metadata.namespace),
      resource: rt.plural,
      body: obj,
      query: writeQuery(opts),
      signal: opts.signal,
    });
  }

  /** Full update (PUT); carries metadata.resourceVersion, so it is an optimistic-concurrency write. */
  async update<T extends KubeObject>(
    rt: ResourceType,
    obj: T,
    opts: WriteOptions & { subresource?: string } = {},
  ): Promise<T> {
    const name = obj.metadata.name ?? '';
    return this.call<T>({
      verb: opts.subresource ? `update/${opts.subresource}` : 'update',
      method: 'PUT',
      path: objectPath(rt, obj.metadata.namespace, name, opts.subresource),
      resource: rt.plural,
      body: obj,
      query: writeQuery(opts),
      signal: opts.signal,
    });
  }

  async patch<T extends KubeObject>(
    rt: ResourceType,
    namespace: string | undefined,
    name: string,
    patch: unknown,
    type: PatchType,
    opts: WriteOptions & { subresource?: string; force?: boolean } = {},
  ): Promise<T> {
    return this.call<T>({
      verb: opts.subresource ? `patch/${opts.subresource}` : 'patch',
      method: 'PATCH',
      path: objectPath(rt, namespace, name, opts.subresource),
      resource: rt.plural,
      body: patch,
      contentType: PATCH_CONTENT_TYPES[type],
      query: { ...writeQuery(opts), force: opts.force },
      signal: opts.signal,
    });
  }

  async delete(rt: ResourceType, namespace: string | undefined, name: string, opts: DeleteOptions = {}): Promise<void> {
    const body = Object.keys(opts).length ? { apiVersion: 'v1', kind: 'DeleteOptions', ...opts } : undefined;
    await this.call<unknown>({
      verb: 'delete',
      method: 'DELETE',
      path: objectPath(rt, namespace, name),
      resource: rt.plural,
      body,
    });
  }

  /** Raw request for paths outside the typed verbs (discovery, /metrics, subresources with custom bodies). */
  async raw(method: RequestSpec['method'], path: string, body?: unknown, contentType?: string): Promise<string> {
    return this.send(
      { verb: method.toLowerCase(), method, path, resource: 'raw', body, contentType },
      true,
    ) as Promise<string>;
  }

  private async call<T>(spec: RequestSpec): Promise<T> {
    return (await this.send(spec, false)) as T;
  }

  private async send(spec: RequestSpec, raw: boolean): Promise<unknown> {
    if (this.limiter) await this.limiter.take();
    if (spec.signal?.aborted) throw aborted(spec);
    const started = performance.now();
    const url = this.url(spec.path, spec.query);
    const payload =
      spec.body === undefined ? undefined : typeof spec.body === 'string' ? spec.body : JSON.stringify(spec.body);
    const headers: Record<string, string | number> = {
      accept: 'application/json',
      'user-agent': this.userAgent,
      ...(this.tls.headers as Record<string, string> | undefined),
    };
    if (payload !== undefined) {
      headers['content-type'] = spec.contentType ?? 'application/json';
      headers['content-length'] = Buffer.byteLength(payload);
    }
    const doRequest = this.base.protocol === 'https:' ? httpsRequest : httpRequest;
    return new Promise((resolve, reject) => {
      const req = doRequest(
        url,
        {
          method: spec.method,
          agent: this.agent,
          headers,
          timeout: spec.timeoutMs ?? this.timeoutMs,
          signal: spec.signal,
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => {
            const code = res.statusCode ?? 0;
            const body = Buffer.concat(chunks).toString('utf8');
            this.metrics?.requests.inc({ verb: spec.verb, resource: spec.resource, code: String(code) });
            this.metrics?.latency.observe({ verb: spec.verb }, (performance.now() - started) / 1000);
            if (code < 200 || code >= 300) return reject(StatusError.fromResponse(code, body, spec.verb, spec.path));
            if (raw) return resolve(body);
            try {
              resolve(body ? JSON.parse(body) : undefined);
            } catch (err) {
              reject(
                new SandboxError('kube.decode', `${spec.verb} ${spec.path}: invalid JSON response`, { cause: err }),
              );
            }
          });
          res.on('error', reject);
        },
      );
      req.on('timeout', () =>
        req.destroy(
          new SandboxError(
            'kube.timeout',
            `${spec.verb} ${spec.path}: no response within ${spec.timeoutMs ?? this.timeoutMs} ms`,
          ),
        ),
      );
      req.on('error', (err) => {
        this.metrics?.requests.inc({ verb: spec.verb, resource: spec.resource, code: '<error>' });
        reject(
          err instanceof SandboxError
            ? err
            : spec.signal?.aborted
              ? aborted(spec)
              : new SandboxError('kube.transport', `${spec.verb} ${spec.path}: ${err.message}`, { cause: err }),
        );
      });
      req.end(payload);
    });
  }

  /**
   * Stream a watch. Resolves when the server ends the stream (timeoutSeconds, or a closed connection); rejects on
   * a non-2xx answer (e.g. 410 Expired for a too-old resourceVersion) or when `signal` aborts.
   */
  watch<T>(
    rt: ResourceType,
    namespace: string | undefined,
    opts: WatchOptions,
    onEvent: (ev: WatchEvent<T>) => void,
    signal?: AbortSignal,
  ): Promise<void> {
    const url = this.url(collectionPath(rt, namespace), { ...opts, watch: true });
    const doRequest = this.base.protocol === 'https:' ? httpsRequest : httpRequest;
    const headers = {
      accept: 'application/json',
      'user-agent': this.userAgent,
      ...(this.tls.headers as Record<string, string> | undefined),
    };
    this.metrics?.requests.inc({ verb: 'watch', resource: rt.plural, code: 'start' });
    return new Promise((resolve, reject) => {
      const req = doRequest(url, { method: 'GET', agent: this.agent, headers, signal }, (res) => {
        const code = res.statusCode ?? 0;
        if (code < 200 || code >= 300) {
          // Counted like any other answer, so a refused watch (403, 410) shows in rest_client_requests_total.
          this.metrics?.requests.inc({ verb: 'watch', resource: rt.plural, code: String(code) });
          let body = '';
          res.on('data', (c: Buffer) => (body += c.toString()));
          res.on('end', () => reject(StatusError.fromResponse(code, body, 'watch', url.pathname)));
          return;
        }
        let buf = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          buf += chunk;
          let nl: number;
          while ((nl = buf.indexOf('\n')) >= 0) {
            const line = buf.slice(0, nl);
            buf = buf.slice(nl + 1);
            if (!line.trim()) continue;
            try {
              onEvent(JSON.parse(line) as WatchEvent<T>);
            } catch (err) {
              req.destroy(err as Error);
              return;
            }
          }
        });
        res.on('end', () => resolve());
        res.on('error', reject);
        res.on('aborted', () => resolve());
      });
      req.on('error', (err) => reject(err));
      req.end();
    });
  }

  private url(path: string, query?: Record<string, string | number | boolean | undefined>): URL {
    const url = new URL(path, this.base);
    if (query)
      for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== '') url.searchParams.set(k, String(v));
    return url;
  }
}

function aborted(spec: RequestSpec): SandboxError {
  const reason: unknown = spec.signal?.reason;
  return new SandboxError(
    'kube.aborted',
    `${spec.verb} ${spec.path}: aborted (${reason instanceof Error ? reason.message : String(reason)})`,
    { cause: reason },
  );
}

function writeQuery(opts: WriteOptions): Record<string, string | undefined> {
  return { fieldManager: opts.fieldManager, dryRun: opts.dryRun ? 'All' : undefined };
}
