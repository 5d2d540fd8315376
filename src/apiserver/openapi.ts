/**
 * OpenAPI for the served resources (docs/aggregated-layout.md, "What the aggregator and kubectl need from the server"),
 * derived from the descriptors: v3 (`/openapi/v3`, a root listing one document per group-version, and each
 * group-version's document) and v2 (`/openapi/v2`, one document).
 *
 * The aggregator copies our v3 root's `paths` verbatim into the cluster's and proxies the listed URLs to us, so
 * the root names only our group-versions. A URL's `hash` is the uppercase hex SHA-512 of the document (kube-openapi
 * handler3): with the current hash the reply may be cached forever; with a stale one upstream redirects, which the
 * aggregator turns into a 502, so we answer the current document (not immutable). The aggregator keeps only v2
 * paths under `/apis/<group>/<version>/` of our APIService; every path of ours is under one.
 */
import { toOpenApiV3Schema } from '../api/index.js';
import type { GroupVersionKind } from './discovery.js';
import { renderPaths } from './openapi-paths.js';
import { kindSchema, listSchema, metaSchemas, modelName, toSwaggerSchema, type Json } from './openapi-schema.js';
import {
  acceptedRanges,
  coversJson,
  notAcceptable,
  notFound,
  serve,
  servedDocument,
  splitUrl,
  type ServedDocument,
  type StaticRequest,
  type StaticResponse,
} from './served-document.js';
import type { ResourceDescriptor } from './types.js';

const INFO = { title: 'sandbox-apiserver', version: 'unversioned' };

interface GroupVersion {
  group: string;
  version: string;
}

function groupVersionsOf(descriptors: readonly ResourceDescriptor[]): GroupVersion[] {
  const seen = new Map<string, GroupVersion>();
  for (const d of descriptors) seen.set(`${d.group}/${d.version}`, { group: d.group, version: d.version });
  return [...seen.values()];
}

/**
 * The v3 schemas of our kinds: each resource's kind and list kind, and each action's request and response kinds.
 * A kind named twice (an action answering with the resource's own kind) must have the same schema each time.
 */
function ourSchemas(descriptors: readonly ResourceDescriptor[]): Record<string, Json> {
  type Kind = { gvk: GroupVersionKind; schema: unknown; plain: string; description: string; served: boolean };
  const kinds = new Map<string, Kind>();
  const lists: Record<string, Json> = {};
  const add = (gvk: GroupVersionKind, schema: unknown, description: string, served = false) => {
    const name = modelName(gvk);
    if (name.startsWith('io.k8s.apimachinery.')) return; // Status: the meta type itself
    const plain = JSON.stringify(toOpenApiV3Schema(schema, `${gvk.group}/${gvk.version} ${gvk.kind}`));
    const existing = kinds.get(name);
    if (existing && existing.plain !== plain) {
      throw new Error(`${gvk.group}/${gvk.version} ${gvk.kind} is given two different schemas`);
    }
    kinds.set(name, {
      gvk,
      schema,
      plain,
      description: existing?.description || description,
      served: served || existing?.served === true,
    });
  };
  for (const d of descriptors) {
    const gvk = (kind: string): GroupVersionKind => ({ group: d.group, version: d.version, kind });
    add(gvk(d.kind), d.schema, d.description, true);
    lists[modelName(gvk(d.listKind))] = listSchema(gvk(d.kind), d.listKind, d.plural);
    for (const s of d.subresources) {
      add(gvk(s.requestKind), s.requestSchema, '');
      add(gvk(s.responseKind), s.responseSchema, '');
    }
  }
  const out: Record<string, Json> = {};
  for (const [name, k] of kinds) out[name] = kindSchema(k.schema, k.gvk, k.description, k.served);
  for (const [name, list] of Object.entries(lists)) {
    if (name in out) throw new Error(`${name} is both a kind and a list kind`);
    out[name] = list;
  }
  return out;
}

function sortedObject<T>(entries: Record<string, T>): Record<string, T> {
  return Object.fromEntries(
    Object.keys(entries)
      .sort()
      .map((k) => [k, entries[k] as T]),
  );
}

/** The v3 document of one group-version (`/openapi/v3/apis/<group>/<version>`). */
export function openApiV3Document(descriptors: readonly ResourceDescriptor[], gv: GroupVersion): Json {
  const served = descriptors.filter((d) => d.group === gv.group && d.version === gv.version);
  if (served.length === 0) throw new Error(`no resource is served in ${gv.group}/${gv.version}`);
  return {
    openapi: '3.0.0',
    info: INFO,
    paths: sortedObject(renderPaths('v3', served)),
    components: { schemas: sortedObject({ ...metaSchemas('v3', [gv]), ...ourSchemas(served) }) },
  };
}

/** The v2 document (`/openapi/v2`) of every served resource. */
export function openApiV2Document(descriptors: readonly ResourceDescriptor[]): Json {
  const ours = Object.fromEntries(Object.entries(ourSchemas(descriptors)).map(([k, v]) => [k, toSwaggerSchema(v)]));
  return {
    swagger: '2.0',
    info: INFO,
    paths: sortedObject(renderPaths('v2', descriptors)),
    definitions: sortedObject({ ...metaSchemas('v2', groupVersionsOf(descriptors)), ...ours }),
  };
}

/** The key a group-version has in the v3 root (no leading slash: the aggregator merges keys verbatim). */
export function openApiV3Key(gv: GroupVersion): string {
  return `apis/${gv.group}/${gv.version}`;
}

const serverRelativeUrl = (key: string, hash: string) => `/openapi/v3/${key}?hash=${hash}`;

/** Where the v3 root sends clients for a group-version's document with the given hash. */
export function openApiV3Url(gv: GroupVersion, hash: string): string {
  return serverRelativeUrl(openApiV3Key(gv), hash);
}

/** The v3 root (`/openapi/v3`) for documents with the given hashes, by key. */
export function openApiV3Root(hashes: ReadonlyMap<string, string>): Json {
  const paths: Record<string, { serverRelativeURL: string }> = {};
  for (const [key, hash] of hashes) paths[key] = { serverRelativeURL: serverRelativeUrl(key, hash) };
  return { paths: sortedObject(paths) };
}

export interface OpenApiHandlerOptions {
  /** The clock for `Expires` (tests pin it). */
  now?: () => number;
}

export type OpenApiHandler = (req: StaticRequest) => StaticResponse | undefined;

/** A JSON reply is acceptable, or 406 (protobuf is never served; a client that also takes JSON gets JSON). */
function jsonAccepted(accept: string | undefined): boolean {
  return acceptedRanges(accept).some((r) => coversJson(r) && r.params.as === undefined);
}

/**
 * `/openapi/v2`, `/openapi/v3` and `/openapi/v3/<key>` as one function of the request; `undefined` for any other
 * path. Documents are computed once. ETags are the quoted hashes; a matching If-None-Match gets 304.
 */
export function createOpenApiHandler(
  descriptors: readonly ResourceDescriptor[],
  opts: OpenApiHandlerOptions = {},
): OpenApiHandler {
  const now = opts.now ?? Date.now;
  const v2 = servedDocument(openApiV2Document(descriptors));
  const v3 = new Map<string, ServedDocument>();
  for (const gv of groupVersionsOf(descriptors))
    v3.set(openApiV3Key(gv), servedDocument(openApiV3Document(descriptors, gv)));
  const root = servedDocument(openApiV3Root(new Map([...v3].map(([k, doc]) => [k, doc.hash]))));
  const offered = ['application/json'];

  return (req) => {
    const { path, query } = splitUrl(req.url);
    if (path === '/openapi/v2') {
      if (!jsonAccepted(req.accept)) return notAcceptable(offered);
      return serve(v2, 'application/json', req.ifNoneMatch, { Vary: 'Accept' });
    }
    if (path === '/openapi/v3' || path === '/openapi/v3/') return serve(root, 'application/json', req.ifNoneMatch);
    if (!path.startsWith('/openapi/v3/')) return undefined;
    const doc = v3.get(path.slice('/openapi/v3/'.length));
    if (!doc) return notFound(path);
    if (!jsonAccepted(req.accept)) return notAcceptable(offered);
    const headers: Record<string, string> = { Vary: 'Accept' };
    if (query.get('hash') === doc.hash) {
      // As handler3: the content at this hash never changes; Expires one year from the request.
      const expires = new Date(now());
      expires.setUTCFullYear(expires.getUTCFullYear() + 1);
      headers['Cache-Control'] = 'public, immutable';
      headers.Expires = expires.toUTCString();
    }
    return serve(doc, 'application/json', req.ifNoneMatch, headers);
  };
}
