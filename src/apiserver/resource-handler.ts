/**
 * Serves one resource's verbs over HTTP from its storage object: query parsing and validation, negotiation of the
 * response shape, rendering, Warning headers, watch streams. Verbs the storage does not implement are 405 (kubectl
 * apply/edit/patch, deletecollection), as they are for any resource without them.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { KubeObject } from '../api/meta.js';
import { readJsonBody, sendJson, warningHeader } from './http.js';
import { parseListOptions, type ListOptions } from './list-options.js';
import { parseFieldSelector } from './selectors.js';
import { negotiate } from './negotiation.js';
import { renderList, renderOne, type Renderer } from './render.js';
import { badRequest, invalid, methodNotAllowed } from './status.js';
import type { RequestInfo, ResourceDescriptor } from './types.js';
import { WatchStream, type WatchEventOf } from './watch-stream.js';

export interface RestStorage<T> {
  readonly descriptor: ResourceDescriptor;
  readonly renderer: Renderer<T>;
  readonly fields: readonly string[];
  /** Sync for a storage served from memory (sandboxes); a promise for one that asks the nodes (sandboxsnapshots). */
  get(namespace: string, name: string): T | Promise<T>;
  list(
    namespace: string,
    opts: ListOptions,
  ):
    | { items: T[]; resourceVersion: string; continueToken: string | undefined; omittedNodes: string[] }
    | Promise<{ items: T[]; resourceVersion: string; continueToken: string | undefined; omittedNodes: string[] }>;
  watch(
    namespace: string,
    opts: ListOptions,
  ): {
    replay: WatchEventOf<T>[] | undefined;
    initial: T[];
    initialEventsEndRv: string | undefined;
    matches(item: T): boolean;
    subscribe(deliver: (ev: WatchEventOf<T>) => void): () => void;
  };
  create(req: {
    namespace: string;
    body: unknown;
    dryRun: boolean;
    fieldValidation: 'Strict' | 'Warn' | 'Ignore';
    warnings: string[];
  }): Promise<{ object: KubeObject }>;
  delete(namespace: string, name: string, opts: { uid?: string; dryRun: boolean }): Promise<KubeObject>;
  bookmark(rv: string, initialEventsEnd: boolean): unknown;
  /** POST to an action subresource (sandboxes/{name}/pause ...); 201 with the response kind. `user` asked. */
  act?(
    namespace: string,
    name: string,
    subresource: string,
    body: unknown,
    warnings: string[],
    user?: string,
  ): Promise<unknown>;
}

/** `dryRun=All` or nothing; any other value is 400 as upstream (handlers/rest.go). */
function dryRunOf(q: URLSearchParams): boolean {
  const values = q.getAll('dryRun');
  if (values.length === 0) return false;
  if (values.every((v) => v === 'All')) return true;
  throw invalid('DryRun', '', '', [
    {
      reason: 'FieldValueNotSupported',
      field: 'dryRun',
      message: `Unsupported value: "${values.join(',')}": supported values: "All"`,
    },
  ]);
}

function fieldValidationOf(q: URLSearchParams): 'Strict' | 'Warn' | 'Ignore' {
  const v = q.get('fieldValidation') ?? '';
  if (v === '' || v === 'Warn') return 'Warn';
  if (v === 'Strict' || v === 'Ignore') return v;
  throw badRequest(`fieldValidation must be one of "Ignore", "Warn" or "Strict" (got "${v}")`);
}

const MAX_WATCH_SECONDS = 30 * 60;

export async function handleResource<T>(
  storage: RestStorage<T>,
  info: RequestInfo,
  req: IncomingMessage,
  res: ServerResponse,
  url: URL,
  /** The authenticated requester's name (the verbs' Events name who asked). */
  user?: string,
): Promise<void> {
  const q = url.searchParams;
  const d = storage.descriptor;
  const what = `${d.plural}${info.subresource ? `/${info.subresource}` : ''}`;
  const warnings: string[] = [];
  if (info.subresource) {
    const sub = d.subresources.find((s) => s.name === info.subresource);
    if (!sub || !storage.act) throw methodNotAllowed(req.method ?? '', what);
    if (info.verb !== 'create') throw methodNotAllowed(req.method ?? '', `${what} (only POST)`);
    const body = await readJsonBody(req);
    const out = await storage.act(info.namespace, info.name, info.subresource, body, warnings, user);
    return sendJson(res, 201, out, warningHeader(warnings) as Record<string, string>);
  }
  switch (info.verb) {
    case 'get': {
      const shape = negotiate(req.headers.accept, 'object');
      return sendJson(res, 200, renderOne(storage.renderer, await storage.get(info.namespace, info.name), shape, q));
    }
    case 'list': {
      const shape = negotiate(req.headers.accept, 'list');
      const opts = namedScope(parseListOptions(q, storage.fields), info.name, storage.fields);
      const out = await storage.list(info.namespace, opts);
      if (out.omittedNodes.length)
        warnings.push(`${d.plural} of unreachable nodes are not listed: ${out.omittedNodes.join(', ')}`);
      const body = renderList(
        storage.renderer,
        out.items,
        { resourceVersion: out.resourceVersion, continue: out.continueToken },
        shape,
        q,
      );
      return sendJson(res, 200, body, warningHeader(warnings) as Record<string, string>);
    }
    case 'watch': {
      const shape = negotiate(req.headers.accept, 'watch');
      const opts = namedScope(parseListOptions(q, storage.fields), info.name, storage.fields);
      const plan = storage.watch(info.namespace, opts);
      // timeoutSeconds=0 means the server's default, as upstream's ListResource reads it, not "close at once".
      const timeout = Math.min(opts.timeoutSeconds || MAX_WATCH_SECONDS, MAX_WATCH_SECONDS) * 1000;
      let unsubscribe = () => {};
      const stream = new WatchStream<T>({
        res,
        renderer: storage.renderer,
        shape,
        query: q,
        matches: plan.matches,
        bookmark: (rv, end) => storage.bookmark(rv, end),
        bookmarks: opts.allowWatchBookmarks,
        timeoutMs: timeout,
        onClose: () => unsubscribe(),
      });
      unsubscribe = plan.subscribe((ev) => stream.deliver(ev));
      for (const ev of plan.replay ?? []) stream.deliver(ev);
      await stream.initial(plan.initial, plan.initialEventsEndRv);
      return;
    }
    case 'create': {
      const body = await readJsonBody(req);
      const created = await storage.create({
        namespace: info.namespace,
        body,
        dryRun: dryRunOf(q),
        fieldValidation: fieldValidationOf(q),
        warnings,
      });
      return sendJson(res, 201, created.object, warningHeader(warnings) as Record<string, string>);
    }
    case 'delete': {
      const body = (await readJsonBody(req)) as { preconditions?: { uid?: string }; dryRun?: string[] } | undefined;
      const dryRun = dryRunOf(q) || (Array.isArray(body?.dryRun) && body!.dryRun.includes('All'));
      const obj = await storage.delete(info.namespace, info.name, { uid: body?.preconditions?.uid, dryRun });
      return sendJson(res, 200, obj);
    }
    default:
      throw methodNotAllowed(req.method ?? '', what);
  }
}

/**
 * A list or watch that names one object (`/watch/namespaces/ns/sandboxes/foo`, or a `metadata.name=foo` field
 * selector, which request-info turns into the name) was authorized for that name alone, so it serves that object
 * alone, as upstream's ListResource does: an empty field selector becomes `metadata.name=<name>`, and one that does
 * not require that exact name is a 400. Before, the path's name was authorized and then ignored, so RBAC
 * `resourceNames` let a watch see every Sandbox of the namespace.
 */
function namedScope(opts: ListOptions, name: string | undefined, fields: readonly string[]): ListOptions {
  if (!name) return opts;
  if (opts.fieldSelector.empty)
    return { ...opts, fieldSelector: parseFieldSelector(`metadata.name=${name.replace(/([\\,=])/g, '\\$1')}`, fields) };
  if (opts.fieldSelector.equal('metadata.name') !== name)
    throw badRequest("fieldSelector metadata.name doesn't match requested name");
  return opts;
}
