import { setMaxListeners } from 'node:events';
import { createServer, type Server } from 'node:http';
import { Registry, collectDefaultMetrics } from 'prom-client';
import { silentLogger, type Logger } from '../log/logger.js';
import { guardRequests } from '../net/guard.js';
import { requestTarget } from '../net/request-target.js';
import type { KubeClient } from './client.js';
import { Controller, type ControllerOptions } from './controller.js';
import { Informer, type InformerOptions } from './informer.js';
import { LeaderElector, type LeaderElectionOptions } from './leader-election.js';
import type { KubeObject, ResourceType } from './resource.js';

/**
 * Runs informers (shared: one watch per resource type), controllers (leader-gated), and the metrics and
 * health endpoints, in controller-runtime's order: servers, caches (wait for sync), leader election, controllers.
 */
export interface ManagerOptions {
  client: KubeClient;
  logger?: Logger;
  registry?: Registry;
  /** host:port or :port; empty or "0" disables. */
  metricsBindAddress?: string;
  healthBindAddress?: string;
  leaderElection?: LeaderElectionOptions | undefined;
  /** Extra readiness checks (e.g. the webhook server is listening). */
  readyChecks?: Array<{ name: string; check: () => boolean }>;
}

export interface Runnable {
  name: string;
  start(signal: AbortSignal): Promise<void>;
  /** Runs only on the elected leader. */
  needsLeader: boolean;
}

export class Manager {
  readonly client: KubeClient;
  readonly registry: Registry;
  readonly log: Logger;
  private readonly informers = new Map<string, Informer<KubeObject>>();
  private readonly controllers: Controller[] = [];
  private readonly runnables: Runnable[] = [];
  private readonly servers: Server[] = [];
  private elected = false;
  private started = false;
  private readonly readyChecks: Array<{ name: string; check: () => boolean }>;
  private lostLeadership: (() => void) | undefined;
  private leaderClient: KubeClient | undefined;
  /** Addresses the HTTP servers actually bound (port 0 picks one). */
  readonly boundAddresses: { metrics?: string; health?: string } = {};

  constructor(private readonly opts: ManagerOptions) {
    this.client = opts.client;
    this.log = opts.logger ?? silentLogger;
    this.registry = opts.registry ?? new Registry();
    this.readyChecks = [...(opts.readyChecks ?? [])];
  }

  /** The shared informer for a resource type (one watch per type per process). */
  informer<T extends KubeObject>(
    rt: ResourceType,
    opts: Omit<InformerOptions, 'logger' | 'registry'> = {},
  ): Informer<T> {
    const id = `${rt.group}/${rt.version}/${rt.plural}|${opts.namespace ?? ''}|${opts.labelSelector ?? ''}|${opts.fieldSelector ?? ''}`;
    let inf = this.informers.get(id);
    if (!inf) {
      if (this.started) throw new Error(`informer for ${rt.plural} requested after the manager started`);
      inf = new Informer<KubeObject>(this.client, rt, { ...opts, logger: this.log, registry: this.registry });
      this.informers.set(id, inf);
    }
    return inf as unknown as Informer<T>;
  }

  controller(opts: Omit<ControllerOptions, 'logger' | 'registry'>): Controller {
    if (this.controllers.some((c) => c.name === opts.name)) throw new Error(`duplicate controller name ${opts.name}`);
    const c = new Controller({ ...opts, logger: this.log, registry: this.registry });
    this.controllers.push(c);
    return c;
  }

  add(r: Runnable): void {
    this.runnables.push(r);
  }

  addReadyCheck(name: string, check: () => boolean): void {
    this.readyChecks.push({ name, check });
  }

  get isLeader(): boolean {
    return this.elected;
  }

  get synced(): boolean {
    return [...this.informers.values()].every((i) => i.hasSynced);
  }

  /** Force every informer to replay its cache to its handlers (makes no API calls). */
  resyncAll(): void {
    for (const inf of this.informers.values()) inf.resync();
  }

  /**
   * Called after leadership was lost and the leader-gated runnables were told to stop. The default exits the
   * process at once (as controller-runtime does), which also drops any request they still have in flight.
   */
  onLostLeadership(fn: () => void): void {
    this.lostLeadership = fn;
  }

  async start(outer: AbortSignal): Promise<void> {
    this.started = true;
    // The first runnable that fails takes the whole manager down (and start() rethrows its error).
    const fatal = new AbortController();
    const signal = AbortSignal.any([outer, fatal.signal]);
    // Every informer, controller and runnable listens on this one signal.
    setMaxListeners(0, signal);
    let fatalError: unknown;
    const guard = (name: string, p: Promise<unknown>, stopped: AbortSignal = signal) =>
      p.catch((err: unknown) => {
        if (stopped.aborted) return;
        this.log.error({ err, runnable: name }, 'runnable failed; stopping the manager');
        fatalError ??= err;
        fatal.abort();
      });
    collectDefaultMetrics({ register: this.registry });
    await this.startServers();
    const tasks: Promise<unknown>[] = [];
    for (const inf of this.informers.values()) tasks.push(guard(`informer/${inf.resource.plural}`, inf.start(signal)));
    for (const r of this.runnables.filter((r) => !r.needsLeader)) tasks.push(guard(r.name, r.start(signal)));
    await Promise.race([Promise.all([...this.informers.values()].map((i) => i.synced())), abortPromise(signal)]);
    if (!signal.aborted) {
      this.log.info({ informers: this.informers.size }, 'caches synced');
      const elector = this.opts.leaderElection && this.elector(this.opts.leaderElection);
      if (!elector || (await elector.acquire(signal))) {
        // Everything the lease guards stops on this signal, the moment leadership is lost.
        const leading = new AbortController();
        const leaderSignal = AbortSignal.any([signal, leading.signal]);
        setMaxListeners(0, leaderSignal);
        this.elected = true;
        const gated = [
          ...this.controllers.map((c) => guard(`controller/${c.name}`, c.run(leaderSignal), leaderSignal)),
          ...this.runnables.filter((r) => r.needsLeader).map((r) => guard(r.name, r.start(leaderSignal), leaderSignal)),
        ];
        tasks.push(...gated);
        if (elector) {
          // Shutting down, the lease is renewed until nothing it guards is still running, then handed over.
          const drained = new AbortController();
          void abortPromise(signal)
            .then(() => Promise.allSettled(gated))
            .then(() => drained.abort());
          tasks.push(
            elector.hold(drained.signal).then(async (lost) => {
              this.elected = false;
              if (lost) {
                leading.abort();
                // Lost while draining a shutdown: the process is stopping anyway.
                if (!signal.aborted) (this.lostLeadership ?? (() => process.exit(1)))();
                return;
              }
              await elector.release().catch((err: unknown) => this.log.warn({ err }, 'could not release the lease'));
            }),
          );
        }
      }
    }
    await abortPromise(signal);
    await this.shutdown(tasks);
    if (fatalError !== undefined) throw fatalError;
  }

  /** The elector gets its own client: unthrottled, own connections, so renewals never queue behind controllers. */
  private elector(opts: LeaderElectionOptions): LeaderElector {
    this.leaderClient = this.client.derive({ qps: -1, userAgent: `${this.client.userAgent}/leader-election` });
    return new LeaderElector(this.leaderClient, { ...opts, logger: this.log });
  }

  private async shutdown(tasks: Promise<unknown>[]): Promise<void> {
    await Promise.allSettled(tasks);
    this.leaderClient?.close();
    await Promise.all(this.servers.map((s) => new Promise((r) => s.close(r))));
    this.log.info('manager stopped');
  }

  private async startServers(): Promise<void> {
    const metrics = this.opts.metricsBindAddress;
    if (metrics && metrics !== '0') {
      this.boundAddresses.metrics = await this.listen(metrics, async (path) => {
        if (path !== '/metrics') return undefined;
        return { type: this.registry.contentType, body: await this.registry.metrics() };
      });
    }
    const health = this.opts.healthBindAddress;
    if (health && health !== '0') {
      this.boundAddresses.health = await this.listen(health, async (path) => {
        if (path === '/healthz') return { type: 'text/plain', body: 'ok' };
        if (path === '/readyz') {
          const failing = [
            ...(this.synced ? [] : ['informers']),
            ...this.readyChecks.filter((c) => !c.check()).map((c) => c.name),
          ];
          return failing.length
            ? { status: 503, type: 'text/plain', body: `not ready: ${failing.join(', ')}` }
            : { type: 'text/plain', body: 'ok' };
        }
        return undefined;
      });
    }
  }

  private listen(
    bind: string,
    handle: (path: string) => Promise<{ status?: number; type: string; body: string } | undefined>,
  ): Promise<string> {
    const [host, port] = splitHostPort(bind);
    const server = createServer(
      guardRequests(this.log, 'manager', async (req, res) => {
        let path: string;
        try {
          path = requestTarget(req, (message) => new Error(message)).pathname;
        } catch (err) {
          res.writeHead(400, { 'content-type': 'text/plain' }).end((err as Error).message);
          return;
        }
        const r = await handle(path).catch((err: unknown) => {
          this.log.error({ err, path }, 'health or metrics request failed');
          return { status: 500, type: 'text/plain', body: 'internal error' };
        });
        if (!r) res.writeHead(404).end('not found');
        else res.writeHead(r.status ?? 200, { 'content-type': r.type }).end(r.body);
      }),
    );
    this.servers.push(server);
    return new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host || undefined, () => {
        const a = server.address();
        resolve(typeof a === 'object' && a ? `${a.address}:${a.port}` : bind);
      });
    });
  }
}

export function splitHostPort(bind: string): [string, number] {
  const i = bind.lastIndexOf(':');
  const host = i >= 0 ? bind.slice(0, i).replace(/^\[|\]$/g, '') : '';
  const port = Number.parseInt(i >= 0 ? bind.slice(i + 1) : bind, 10);
  return [host, Number.isFinite(port) ? port : 0];
}

function abortPromise(signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    signal.addEventListener('abort', () => resolve(), { once: true });
  });
}
