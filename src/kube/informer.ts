import { setTimeout as sleep } from 'node:timers/promises';
import { Counter, type Registry } from 'prom-client';
import { silentLogger, type Logger } from '../log/logger.js';
import type { KubeClient, WatchEvent } from './client.js';
import { keyOf, type KubeObject, type ResourceType } from './resource.js';
import { isGone, StatusError } from './status-errors.js';

/**
 * A shared informer: one LIST at start, then one long-lived WATCH resumed from the last resourceVersion seen
 * (bookmarks keep it fresh). It relists only when the server says the resourceVersion is too old (410), so a
 * steady state makes zero LIST calls. A watchdog restarts a watch that went silent (Node watch streams can stall
 * without an error; see pepr ADR 0015).
 */

export interface EventHandler<T> {
  onAdd?(obj: T): void;
  onUpdate?(oldObj: T, newObj: T): void;
  onDelete?(obj: T): void;
}

export interface InformerOptions {
  namespace?: string;
  labelSelector?: string;
  fieldSelector?: string;
  pageSize?: number;
  /** Server-side watch timeout; the watch is then resumed from the last resourceVersion (no LIST). */
  watchTimeoutSeconds?: number;
  logger?: Logger;
  registry?: Registry;
}

type IndexFn<T> = (obj: T) => string[];

const metricsFor = new WeakMap<Registry, { events: Counter<string>; lists: Counter<string> }>();
function informerMetrics(registry: Registry | undefined) {
  if (!registry) return undefined;
  let m = metricsFor.get(registry);
  if (!m) {
    m = {
      events: new Counter({
        name: 'informer_watch_events_total',
        help: 'Watch events received',
        labelNames: ['resource', 'type'],
        registers: [registry],
      }),
      lists: new Counter({
        name: 'informer_lists_total',
        help: 'Full LISTs (start and 410 relists)',
        labelNames: ['resource', 'why'],
        registers: [registry],
      }),
    };
    metricsFor.set(registry, m);
  }
  return m;
}

export class Informer<T extends KubeObject> {
  private readonly store = new Map<string, T>();
  private readonly handlers: EventHandler<T>[] = [];
  private readonly indexers = new Map<string, IndexFn<T>>();
  private readonly indices = new Map<string, Map<string, Set<string>>>();
  private resourceVersion = '';
  private syncedFlag = false;
  private resolveSynced!: () => void;
  private readonly syncedPromise = new Promise<void>((r) => (this.resolveSynced = r));
  private readonly log: Logger;
  private readonly metrics: ReturnType<typeof informerMetrics>;
  private lastActivity = Date.now();

  constructor(
    private readonly client: KubeClient,
    readonly resource: ResourceType,
    private readonly opts: InformerOptions = {},
  ) {
    this.log = (opts.logger ?? silentLogger).child({ informer: resource.plural });
    this.metrics = informerMetrics(opts.registry);
  }

  get hasSynced(): boolean {
    return this.syncedFlag;
  }

  synced(): Promise<void> {
    return this.syncedPromise;
  }

  get lastResourceVersion(): string {
    return this.resourceVersion;
  }

  addHandler(h: EventHandler<T>): void {
    this.handlers.push(h);
    if (this.syncedFlag) for (const obj of this.store.values()) h.onAdd?.(obj);
  }

  /** Index objects by computed values (e.g. owner UID, label value); lookups are O(matches). */
  addIndex(name: string, fn: IndexFn<T>): void {
    this.indexers.set(name, fn);
    const idx = new Map<string, Set<string>>();
    this.indices.set(name, idx);
    for (const [key, obj] of this.store) for (const v of fn(obj)) addTo(idx, v, key);
  }

  byIndex(name: string, value: string): T[] {
    const keys = this.indices.get(name)?.get(value);
    if (!keys) return [];
    const out: T[] = [];
    for (const k of keys) {
      const obj = this.store.get(k);
      if (obj) out.push(obj);
    }
    return out;
  }

  countByIndex(name: string, value: string): number {
    return this.indices.get(name)?.get(value)?.size ?? 0;
  }

  get(key: string): T | undefined {
    return this.store.get(key);
  }

  getByName(namespace: string | undefined, name: string): T | undefined {
    return this.store.get(namespace ? `${namespace}/${name}` : name);
  }

  list(): T[] {
    return [...this.store.values()];
  }

  get size(): number {
    return this.store.size;
  }

  /** Replay every cached object to the handlers as an update (a forced resync; makes no API calls). */
  resync(): void {
    for (const obj of this.store.values()) for (const h of this.handlers) h.onUpdate?.(obj, obj);
  }

  async start(signal: AbortSignal): Promise<void> {
    let needList = true;
    let backoffMs = 500;
    while (!signal.aborted) {
      try {
        if (needList) {
          await this.relist(this.syncedFlag ? 'expired' : 'start');
          needList = false;
        }
        await this.watchOnce(signal);
        backoffMs = 500;
      } catch (err) {
        if (signal.aborted) break;
        if (isGone(err) || (err instanceof StatusError && err.reason === 'Expired')) {
          this.log.info({ resourceVersion: this.resourceVersion }, 'watch resourceVersion expired; relisting');
          needList = true;
          continue;
        }
        this.log.warn({ err }, 'watch failed; retrying');
        await sleep(backoffMs, undefined, { signal }).catch(() => {});
        backoffMs = Math.min(backoffMs * 2, 30_000);
      }
    }
  }

  private async relist(why: 'start' | 'expired'): Promise<void> {
    this.metrics?.lists.inc({ resource: this.resource.plural, why });
    const fresh = new Map<string, T>();
    let cont: string | undefined;
    let rv = '';
    do {
      const page = await this.client.list<T>(this.resource, this.opts.namespace, {
        labelSelector: this.opts.labelSelector,
        fieldSelector: this.opts.fieldSelector,
        limit: this.opts.pageSize ?? 500,
        continue: cont,
      });
      for (const item of page.items) fresh.set(keyOf(item), withKind(item, this.resource));
      cont = page.metadata.continue || undefined;
      rv = page.metadata.resourceVersion ?? rv;
    } while (cont);
    for (const [key, old] of this.store) if (!fresh.has(key)) this.remove(key, old);
    for (const [key, obj] of fresh) this.upsert(key, obj);
    this.resourceVersion = rv;
    if (!this.syncedFlag) {
      this.syncedFlag = true;
      this.resolveSynced();
    }
  }

  private async watchOnce(signal: AbortSignal): Promise<void> {
    const ctrl = new AbortController();
    const onAbort = () => ctrl.abort();
    signal.addEventListener('abort', onAbort, { once: true });
    const timeoutSeconds = this.opts.watchTimeoutSeconds ?? 300 + Math.floor(Math.random() * 60);
    this.lastActivity = Date.now();
    const watchdog = setInterval(() => {
      if (Date.now() - this.lastActivity > (timeoutSeconds + 30) * 1000) {
        this.log.warn('watch silent past its timeout; restarting it');
        ctrl.abort();
      }
    }, 10_000);
    try {
      await this.client.watch<T>(
        this.resource,
        this.opts.namespace,
        {
          resourceVersion: this.resourceVersion,
          allowWatchBookmarks: true,
          labelSelector: this.opts.labelSelector,
          fieldSelector: this.opts.fieldSelector,
          timeoutSeconds,
        },
        (ev) => this.onEvent(ev),
        ctrl.signal,
      );
    } catch (err) {
      if (ctrl.signal.aborted && !signal.aborted) return; // watchdog restart: resume from last RV
      throw err;
    } finally {
      clearInterval(watchdog);
      signal.removeEventListener('abort', onAbort);
    }
  }

  private onEvent(ev: WatchEvent<T>): void {
    this.lastActivity = Date.now();
    this.metrics?.events.inc({ resource: this.resource.plural, type: ev.type });
    if (ev.type === 'ERROR') {
      const status = ev.object as unknown as { code?: number; message?: string; reason?: string };
      throw StatusError.fromResponse(status.code ?? 500, JSON.stringify(ev.object), 'watch', this.resource.plural);
    }
    const rv = ev.object.metadata?.resourceVersion;
    if (ev.type === 'BOOKMARK') {
      if (rv) this.resourceVersion = rv;
      return;
    }
    const obj = withKind(ev.object, this.resource);
    const key = keyOf(obj);
    if (ev.type === 'DELETED') {
      const old = this.store.get(key);
      if (old) this.remove(key, old, obj);
    } else this.upsert(key, obj);
    if (rv) this.resourceVersion = rv;
  }

  private upsert(key: string, obj: T): void {
    const old = this.store.get(key);
    if (old && old.metadata.resourceVersion === obj.metadata.resourceVersion) return;
    this.store.set(key, obj);
    this.reindex(key, old, obj);
    for (const h of this.handlers) {
      try {
        if (old) h.onUpdate?.(old, obj);
        else h.onAdd?.(obj);
      } catch (err) {
        this.log.error({ err }, 'event handler threw');
      }
    }
  }

  private remove(key: string, old: T, final: T = old): void {
    this.store.delete(key);
    this.reindex(key, old, undefined);
    for (const h of this.handlers) {
      try {
        h.onDelete?.(final);
      } catch (err) {
        this.log.error({ err }, 'event handler threw');
      }
    }
  }

  private reindex(key: string, oldObj: T | undefined, newObj: T | undefined): void {
    for (const [name, fn] of this.indexers) {
      const idx = this.indices.get(name)!;
      if (oldObj) for (const v of fn(oldObj)) removeFrom(idx, v, key);
      if (newObj) for (const v of fn(newObj)) addTo(idx, v, key);
    }
  }
}

/**
 * Cached objects get their kind back (lists and watches omit it) and lose managedFields, as client-go's
 * TransformStripManagedFields does: nothing here reads them, and on Pods they are about half the object, so every
 * replaced cache entry was that much more old-generation garbage (major GC pauses on the claim path).
 */
function withKind<T extends KubeObject>(obj: T, rt: ResourceType): T {
  if (obj.metadata?.managedFields) delete obj.metadata.managedFields;
  if (!obj.kind) obj.kind = rt.kind;
  if (!obj.apiVersion) obj.apiVersion = rt.group ? `${rt.group}/${rt.version}` : rt.version;
  return obj;
}

function addTo(idx: Map<string, Set<string>>, value: string, key: string) {
  let s = idx.get(value);
  if (!s) idx.set(value, (s = new Set()));
  s.add(key);
}

function removeFrom(idx: Map<string, Set<string>>, value: string, key: string) {
  const s = idx.get(value);
  if (!s) return;
  s.delete(key);
  if (s.size === 0) idx.delete(value);
}
