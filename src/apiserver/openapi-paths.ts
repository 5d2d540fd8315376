/**
 * The operations of a served resource, described once and rendered as OpenAPI v3 and v2 (Swagger 2.0) path
 * items. Only what the descriptor's verbs say is served appears: list/watch on the collection (and, for a
 * namespaced resource, across namespaces), create on the collection, get and delete on the item, and a POST per
 * action subresource. Names, operation ids, tags and parameters follow kube-apiserver's own documents
 * (k8s.io/apiserver pkg/endpoints/openapi): kubectl explain finds the GVK on the collection or item operations,
 * and the query-parameter verifier reads the operations' parameters.
 */
import type { GroupVersionKind } from './discovery.js';
import {
  modelName,
  standardParameter,
  V2_PREFIX,
  V3_PREFIX,
  type Json,
  type OpenApiVersion,
} from './openapi-schema.js';
import type { ResourceDescriptor } from './types.js';

const LIST_PARAMS = [
  'allowWatchBookmarks',
  'continue',
  'fieldSelector',
  'labelSelector',
  'limit',
  'resourceVersion',
  'resourceVersionMatch',
  'sendInitialEvents',
  'timeoutSeconds',
  'watch',
];
const WATCH_ONLY = new Set(['allowWatchBookmarks', 'sendInitialEvents', 'watch']);
const CREATE_PARAMS = ['dryRun', 'fieldManager', 'fieldValidation'];
const DELETE_PARAMS = ['dryRun', 'gracePeriodSeconds', 'orphanDependents', 'propagationPolicy'];

interface Operation {
  method: 'get' | 'post' | 'delete';
  operationId: string;
  description: string;
  action: 'list' | 'watch' | 'get' | 'post' | 'delete';
  gvk: GroupVersionKind;
  query: string[];
  body?: { model: string; required: boolean };
  responses: { code: number; description: string; model: string }[];
  /** Also answers `application/json;stream=watch`. */
  streams?: boolean;
}

interface PathItem {
  path: string;
  /** The `{name}` parameter's kind, when the path has one. */
  nameOf?: string;
  namespaced: boolean;
  /** Query parameters shared by every operation of the path (kube-apiserver puts list options there). */
  query: string[];
  operations: Operation[];
}

const camel = (s: string) => s.charAt(0).toUpperCase() + s.slice(1);

/** kube-apiserver's operation-id vocabulary: agents.x-k8s.io/v1beta1 -> AgentsXK8sIoV1beta1, tag agentsXK8sIo_v1beta1. */
function groupWords(group: string): string {
  return group.split(/[.-]/).map(camel).join('');
}

export function tagOf(d: Pick<ResourceDescriptor, 'group' | 'version'>): string {
  const g = groupWords(d.group);
  return `${g.charAt(0).toLowerCase()}${g.slice(1)}_${d.version}`;
}

/** The path items of one resource, in the neutral form both renderers take. */
function describe(d: ResourceDescriptor): PathItem[] {
  const gvk = (kind: string): GroupVersionKind => ({ group: d.group, version: d.version, kind });
  const model = (kind: string) => modelName(gvk(kind));
  const id = `${groupWords(d.group)}${camel(d.version)}`;
  const scoped = d.namespaced ? 'Namespaced' : '';
  const base = `/apis/${d.group}/${d.version}`;
  const collection = d.namespaced ? `${base}/namespaces/{namespace}/${d.plural}` : `${base}/${d.plural}`;
  const has = (v: ResourceDescriptor['verbs'][number]) => d.verbs.includes(v);
  const lists = has('list') || has('watch');
  const listQuery = LIST_PARAMS.filter((p) => has('watch') || !WATCH_ONLY.has(p));
  const listOp = (operationId: string, query: string[]): Operation => ({
    method: 'get',
    operationId,
    description: `${has('list') ? 'list' : ''}${has('list') && has('watch') ? ' or ' : ''}${has('watch') ? 'watch' : ''} objects of kind ${d.kind}`,
    action: has('list') ? 'list' : 'watch',
    gvk: gvk(d.kind),
    query,
    responses: [{ code: 200, description: 'OK', model: model(d.listKind) }],
    streams: has('watch'),
  });
  const created = (kind: string) => [
    { code: 200, description: 'OK', model: model(kind) },
    { code: 201, description: 'Created', model: model(kind) },
    { code: 202, description: 'Accepted', model: model(kind) },
  ];

  const items: PathItem[] = [];
  const collectionOps: Operation[] = [];
  if (lists) collectionOps.push(listOp(`list${id}${scoped}${d.kind}`, listQuery));
  if (has('create')) {
    collectionOps.push({
      method: 'post',
      operationId: `create${id}${scoped}${d.kind}`,
      description: `create a ${d.kind}`,
      action: 'post',
      gvk: gvk(d.kind),
      query: CREATE_PARAMS,
      body: { model: model(d.kind), required: true },
      responses: created(d.kind),
    });
  }
  if (collectionOps.length > 0)
    items.push({ path: collection, namespaced: d.namespaced, query: [], operations: collectionOps });

  const itemOps: Operation[] = [];
  if (has('get')) {
    itemOps.push({
      method: 'get',
      operationId: `read${id}${scoped}${d.kind}`,
      description: `read the specified ${d.kind}`,
      action: 'get',
      gvk: gvk(d.kind),
      query: [],
      responses: [{ code: 200, description: 'OK', model: model(d.kind) }],
    });
  }
  if (has('delete')) {
    const status = modelName(gvk('Status'));
    itemOps.push({
      method: 'delete',
      operationId: `delete${id}${scoped}${d.kind}`,
      description: `delete a ${d.kind}`,
      action: 'delete',
      gvk: gvk(d.kind),
      query: DELETE_PARAMS,
      body: { model: 'io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions', required: false },
      responses: [
        { code: 200, description: 'OK', model: status },
        { code: 202, description: 'Accepted', model: status },
      ],
    });
  }
  const item = `${collection}/{name}`;
  if (itemOps.length > 0)
    items.push({ path: item, nameOf: d.kind, namespaced: d.namespaced, query: [], operations: itemOps });

  for (const s of d.subresources) {
    items.push({
      path: `${item}/${s.name}`,
      nameOf: s.requestKind,
      namespaced: d.namespaced,
      query: [],
      operations: [
        {
          method: 'post',
          operationId: `create${id}${scoped}${d.kind}${camel(s.name)}`,
          description: s.description || `create ${s.requestKind} of a ${d.kind}`,
          action: 'post',
          gvk: gvk(s.requestKind),
          query: CREATE_PARAMS,
          body: { model: model(s.requestKind), required: true },
          responses: created(s.responseKind),
        },
      ],
    });
  }
  if (d.namespaced && lists) {
    items.push({
      path: `${base}/${d.plural}`,
      namespaced: false,
      query: listQuery,
      operations: [{ ...listOp(`list${id}${d.kind}ForAllNamespaces`, []) }],
    });
  }
  return items;
}

function nameParameter(version: OpenApiVersion, kind: string): Json {
  const common = { description: `name of the ${kind}`, in: 'path', name: 'name', required: true };
  return version === 'v3'
    ? { ...common, schema: { type: 'string', uniqueItems: true } }
    : { ...common, type: 'string', uniqueItems: true };
}

const ref = (version: OpenApiVersion, model: string) => ({
  $ref: `${version === 'v3' ? V3_PREFIX : V2_PREFIX}${model}`,
});

function renderOperation(version: OpenApiVersion, op: Operation, tag: string): Json {
  const produces = op.streams ? ['application/json', 'application/json;stream=watch'] : ['application/json'];
  const parameters: Json[] = op.query.map((p) => standardParameter(version, p));
  const responses: Json = {};
  for (const r of op.responses) {
    responses[r.code] =
      version === 'v3'
        ? {
            description: r.description,
            content: Object.fromEntries(produces.map((t) => [t, { schema: ref(version, r.model) }])),
          }
        : { description: r.description, schema: ref(version, r.model) };
  }
  responses[401] = { description: 'Unauthorized' };
  const out: Json = { description: op.description, operationId: op.operationId };
  if (version === 'v3' && op.body) {
    out.requestBody = {
      content: { '*/*': { schema: ref(version, op.body.model) } },
      ...(op.body.required ? { required: true } : {}),
    };
  }
  if (version === 'v2') {
    out.consumes = ['*/*'];
    out.produces = produces;
    out.schemes = ['https'];
    if (op.body)
      parameters.unshift({ in: 'body', name: 'body', required: op.body.required, schema: ref(version, op.body.model) });
  }
  if (parameters.length > 0) out.parameters = parameters;
  out.responses = responses;
  out.tags = [tag];
  out['x-kubernetes-action'] = op.action;
  out['x-kubernetes-group-version-kind'] = { ...op.gvk };
  return out;
}

/** `paths` of a document: every operation of every descriptor, as v3 or v2 path items. */
export function renderPaths(version: OpenApiVersion, descriptors: readonly ResourceDescriptor[]): Record<string, Json> {
  const paths: Record<string, Json> = {};
  for (const d of descriptors) {
    const tag = tagOf(d);
    for (const item of describe(d)) {
      if (item.path in paths) throw new Error(`${item.path} is served twice`);
      const out: Json = {};
      for (const op of item.operations) out[op.method] = renderOperation(version, op, tag);
      const shared: Json[] = [];
      if (item.nameOf) shared.push(nameParameter(version, item.nameOf));
      if (item.namespaced) shared.push(standardParameter(version, 'namespace'));
      shared.push(...item.query.map((p) => standardParameter(version, p)));
      if (shared.length > 0) out.parameters = shared;
      paths[item.path] = out;
    }
  }
  return paths;
}
