/**
 * API discovery, derived from the served resources (docs/aggregated-layout.md, "What the aggregator and kubectl need
 * from the server"): the legacy documents (`/apis` APIGroupList, `/apis/<group>` APIGroup, `/apis/<group>/<version>`
 * APIResourceList) and the aggregated APIGroupDiscoveryList (apidiscovery.k8s.io v2 and v2beta1) the aggregator asks
 * `/apis` for every minute. The aggregator uses the v2 reply only when its Content-Type carries exactly the g/v/as
 * parameters it asked for; anything else but 503 makes it fall back to the legacy GET, so a v2-only Accept we cannot
 * honor gets 406, never a plain-JSON 200.
 *
 * Order: groups and versions as the descriptors first name them (the first version is the preferred one);
 * resources, subresources and verbs sorted, as k8s.io/apiserver lists them.
 */
import type { ActionSubresource, ResourceDescriptor } from './types.js';
import {
  acceptedRanges,
  coversJson,
  notAcceptable,
  serve,
  servedDocument,
  splitUrl,
  type MediaRange,
  type ServedDocument,
  type StaticRequest,
  type StaticResponse,
} from './served-document.js';

export const DISCOVERY_GROUP = 'apidiscovery.k8s.io';
export type AggregatedVersion = 'v2' | 'v2beta1';
export const AGGREGATED_VERSIONS: readonly AggregatedVersion[] = ['v2', 'v2beta1'];

/** The Content-Type of an aggregated discovery reply (client-go's AcceptV2 / AcceptV2Beta1). */
export function aggregatedContentType(version: AggregatedVersion): string {
  return `application/json;g=${DISCOVERY_GROUP};v=${version};as=APIGroupDiscoveryList`;
}

export interface GroupVersionForDiscovery {
  groupVersion: string;
  version: string;
}

export interface APIGroup {
  kind?: 'APIGroup';
  apiVersion?: 'v1';
  name: string;
  versions: GroupVersionForDiscovery[];
  preferredVersion: GroupVersionForDiscovery;
}

export interface APIGroupList {
  kind: 'APIGroupList';
  apiVersion: 'v1';
  groups: APIGroup[];
}

export interface APIResource {
  name: string;
  singularName: string;
  namespaced: boolean;
  kind: string;
  verbs: string[];
  shortNames?: string[];
  categories?: string[];
}

export interface APIResourceList {
  kind: 'APIResourceList';
  apiVersion: 'v1';
  groupVersion: string;
  resources: APIResource[];
}

export interface GroupVersionKind {
  group: string;
  version: string;
  kind: string;
}

export interface APISubresourceDiscovery {
  subresource: string;
  responseKind: GroupVersionKind;
  acceptedTypes: GroupVersionKind[];
  verbs: string[];
}

export interface APIResourceDiscovery {
  resource: string;
  responseKind: GroupVersionKind;
  scope: 'Namespaced' | 'Cluster';
  singularResource: string;
  verbs: string[];
  shortNames?: string[];
  categories?: string[];
  subresources?: APISubresourceDiscovery[];
}

export interface APIGroupDiscoveryList {
  kind: 'APIGroupDiscoveryList';
  apiVersion: string;
  metadata: Record<string, never>;
  items: {
    metadata: { name: string };
    versions: { version: string; resources: APIResourceDiscovery[]; freshness: 'Current' }[];
  }[];
}

const byName = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
const ACTION_VERBS = ['create'];

/** Groups -> versions -> resources, in descriptor order, after checking the descriptors can be served together. */
function index(descriptors: readonly ResourceDescriptor[]): Map<string, Map<string, ResourceDescriptor[]>> {
  const groups = new Map<string, Map<string, ResourceDescriptor[]>>();
  for (const d of descriptors) {
    const where = `${d.plural}.${d.version}.${d.group}`;
    if (!d.group || !d.version || !d.plural || !d.kind)
      throw new Error(`${where}: group, version, plural and kind are required`);
    if (d.verbs.length === 0) throw new Error(`${where}: a served resource needs at least one verb`);
    const versions = groups.get(d.group) ?? new Map<string, ResourceDescriptor[]>();
    groups.set(d.group, versions);
    const resources = versions.get(d.version) ?? [];
    versions.set(d.version, resources);
    if (resources.some((r) => r.plural === d.plural)) throw new Error(`${where} is described twice`);
    const subs = d.subresources.map((s) => s.name);
    if (new Set(subs).size !== subs.length) throw new Error(`${where}: a subresource is listed twice`);
    resources.push(d);
  }
  return groups;
}

function groupVersions(group: string, versions: Iterable<string>): GroupVersionForDiscovery[] {
  return [...versions].map((version) => ({ groupVersion: `${group}/${version}`, version }));
}

function apiGroupOf(group: string, versions: Map<string, ResourceDescriptor[]>): APIGroup {
  const list = groupVersions(group, versions.keys());
  return { name: group, versions: list, preferredVersion: list[0]! };
}

export function apiGroupList(descriptors: readonly ResourceDescriptor[]): APIGroupList {
  const groups = [...index(descriptors)].map(([group, versions]) => apiGroupOf(group, versions));
  return { kind: 'APIGroupList', apiVersion: 'v1', groups };
}

/** `/apis/<group>`, or undefined when no descriptor is of that group. */
export function apiGroup(descriptors: readonly ResourceDescriptor[], group: string): APIGroup | undefined {
  const versions = index(descriptors).get(group);
  return versions && { kind: 'APIGroup', apiVersion: 'v1', ...apiGroupOf(group, versions) };
}

const sortedActions = (d: ResourceDescriptor): ActionSubresource[] =>
  [...d.subresources].sort((a, b) => byName(a.name, b.name));

const optionalLists = (d: ResourceDescriptor) => ({
  ...(d.shortNames.length > 0 ? { shortNames: [...d.shortNames] } : {}),
  ...(d.categories.length > 0 ? { categories: [...d.categories] } : {}),
});

/**
 * `/apis/<group>/<version>`, or undefined when not served. An action subresource has verbs [create], its parent's
 * scope (the aggregator rejects the whole group-version otherwise) and, as k8s.io/apiserver reports the kind of
 * the storage's New() object, the kind of its request body.
 */
export function apiResourceList(
  descriptors: readonly ResourceDescriptor[],
  group: string,
  version: string,
): APIResourceList | undefined {
  const resources = index(descriptors).get(group)?.get(version);
  if (!resources) return undefined;
  const list: APIResource[] = [];
  for (const d of resources) {
    list.push({
      name: d.plural,
      singularName: d.singular,
      namespaced: d.namespaced,
      kind: d.kind,
      verbs: [...d.verbs].sort(byName),
      ...optionalLists(d),
    });
    for (const s of sortedActions(d)) {
      list.push({
        name: `${d.plural}/${s.name}`,
        singularName: '',
        namespaced: d.namespaced,
        kind: s.requestKind,
        verbs: [...ACTION_VERBS],
      });
    }
  }
  list.sort((a, b) => byName(a.name, b.name));
  return { kind: 'APIResourceList', apiVersion: 'v1', groupVersion: `${group}/${version}`, resources: list };
}

function resourceDiscovery(d: ResourceDescriptor): APIResourceDiscovery {
  const gvk = (kind: string): GroupVersionKind => ({ group: d.group, version: d.version, kind });
  const subresources = sortedActions(d).map((s) => ({
    subresource: s.name,
    responseKind: gvk(s.responseKind),
    acceptedTypes: [gvk(s.requestKind)],
    verbs: [...ACTION_VERBS],
  }));
  return {
    resource: d.plural,
    responseKind: gvk(d.kind),
    scope: d.namespaced ? 'Namespaced' : 'Cluster',
    singularResource: d.singular,
    verbs: [...d.verbs].sort(byName),
    ...optionalLists(d),
    ...(subresources.length > 0 ? { subresources } : {}),
  };
}

/** The aggregated document for `/apis` (v2 and v2beta1 have the same shape). */
export function aggregatedDiscovery(
  descriptors: readonly ResourceDescriptor[],
  version: AggregatedVersion = 'v2',
): APIGroupDiscoveryList {
  const items = [...index(descriptors)].map(([group, versions]) => ({
    metadata: { name: group },
    versions: [...versions].map(([v, resources]) => ({
      version: v,
      resources: [...resources].sort((a, b) => byName(a.plural, b.plural)).map(resourceDiscovery),
      freshness: 'Current' as const,
    })),
  }));
  return { kind: 'APIGroupDiscoveryList', apiVersion: `${DISCOVERY_GROUP}/${version}`, metadata: {}, items };
}

/** Which representation a media range asks for: plain JSON, an aggregated version, or nothing we serve. */
function representationOf(range: MediaRange): 'legacy' | AggregatedVersion | undefined {
  const { as, g, v } = range.params;
  if (as === undefined && g === undefined && v === undefined) return coversJson(range) ? 'legacy' : undefined;
  if (range.type !== 'application/json' || as !== 'APIGroupDiscoveryList' || g !== DISCOVERY_GROUP) return undefined;
  return AGGREGATED_VERSIONS.find((known) => known === v);
}

export type DiscoveryHandler = (req: StaticRequest) => StaticResponse | undefined;

/**
 * The discovery endpoints as one function of the request: `undefined` for a path that is not one of our discovery
 * documents (the server routes it on), otherwise the reply. Documents are computed once; each representation has
 * its own ETag (the hash of its bytes) and every reply says `Vary: Accept`.
 */
export function createDiscoveryHandler(descriptors: readonly ResourceDescriptor[]): DiscoveryHandler {
  const groups = index(descriptors);
  const root = servedDocument(apiGroupList(descriptors));
  const aggregated = Object.fromEntries(
    AGGREGATED_VERSIONS.map((v) => [v, servedDocument(aggregatedDiscovery(descriptors, v))]),
  ) as Record<AggregatedVersion, ServedDocument>;
  const perPath = new Map<string, ServedDocument>();
  for (const [group, versions] of groups) {
    perPath.set(`/apis/${group}`, servedDocument(apiGroup(descriptors, group)));
    for (const version of versions.keys()) {
      perPath.set(`/apis/${group}/${version}`, servedDocument(apiResourceList(descriptors, group, version)));
    }
  }
  const legacyOnly = ['application/json'];
  const atRoot = [...legacyOnly, ...AGGREGATED_VERSIONS.map(aggregatedContentType)];

  return (req) => {
    const path = splitUrl(req.url).path.replace(/(.)\/$/, '$1');
    const isRoot = path === '/apis';
    const legacy = isRoot ? root : perPath.get(path);
    if (!legacy) return undefined;
    for (const range of acceptedRanges(req.accept)) {
      const wanted = representationOf(range);
      if (wanted === 'legacy') return serve(legacy, 'application/json', req.ifNoneMatch, { Vary: 'Accept' });
      if (wanted && isRoot) {
        return serve(aggregated[wanted], aggregatedContentType(wanted), req.ifNoneMatch, {
          Vary: 'Accept',
          'Cache-Control': 'public',
        });
      }
    }
    return notAcceptable(isRoot ? atRoot : legacyOnly);
  };
}
