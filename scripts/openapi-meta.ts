/**
 * Extracts what sandbox-apiserver's OpenAPI documents share with kube-apiserver's from the Kubernetes v1.36.3
 * documents (api/openapi-spec: v3 per group-version and the v2 swagger.json): the meta.k8s.io schemas our kinds
 * reference (ObjectMeta, ListMeta, Status, DeleteOptions, WatchEvent and what they reference), and the standard
 * query and path parameters. Copied verbatim, so our definitions are the ones kubectl already knows, and the
 * aggregator's v2 merge finds them equal to its own instead of renaming them `..._v2`.
 *
 * Pure functions only: reading the files is the caller's job (scripts/generate.ts).
 */

type Json = { [key: string]: unknown };

/** The meta types our documents reference directly; their dependencies come along. */
export const META_ROOTS = ['ObjectMeta', 'ListMeta', 'Status', 'DeleteOptions', 'WatchEvent'].map(
  (k) => `io.k8s.apimachinery.pkg.apis.meta.v1.${k}`,
);

/** The standard parameters, taken from a built-in resource's operations (their descriptions are generic). */
const PARAMETER_SOURCES = {
  list: ['/apis/apps/v1/namespaces/{namespace}/deployments', 'get'],
  create: ['/apis/apps/v1/namespaces/{namespace}/deployments', 'post'],
  delete: ['/apis/apps/v1/namespaces/{namespace}/deployments/{name}', 'delete'],
  path: ['/apis/apps/v1/namespaces/{namespace}/deployments/{name}', 'parameters'],
} as const;

export const PARAMETER_NAMES = [
  'allowWatchBookmarks',
  'continue',
  'dryRun',
  'fieldManager',
  'fieldSelector',
  'fieldValidation',
  'gracePeriodSeconds',
  'labelSelector',
  'limit',
  'namespace',
  'orphanDependents',
  'propagationPolicy',
  'resourceVersion',
  'resourceVersionMatch',
  'sendInitialEvents',
  'timeoutSeconds',
  'watch',
] as const;

export interface MetaOpenApi {
  v3: { schemas: Record<string, Json>; parameters: Record<string, Json> };
  v2: { definitions: Record<string, Json>; parameters: Record<string, Json> };
}

function refsIn(node: unknown, prefix: string, out: Set<string>): void {
  if (Array.isArray(node)) for (const n of node) refsIn(n, prefix, out);
  else if (node !== null && typeof node === 'object') {
    for (const [k, v] of Object.entries(node)) {
      if (k === '$ref' && typeof v === 'string' && v.startsWith(prefix)) out.add(v.slice(prefix.length));
      else refsIn(v, prefix, out);
    }
  }
}

/** `roots` and every schema they reference, transitively. */
function closure(schemas: Record<string, Json>, roots: readonly string[], prefix: string): Record<string, Json> {
  const out: Record<string, Json> = {};
  const pending = [...roots];
  for (let name = pending.pop(); name !== undefined; name = pending.pop()) {
    if (name in out) continue;
    const schema = schemas[name];
    if (!schema) throw new Error(`${name} is not in the Kubernetes OpenAPI document`);
    out[name] = schema;
    const refs = new Set<string>();
    refsIn(schema, prefix, refs);
    pending.push(...refs);
  }
  return Object.fromEntries(Object.entries(out).sort(([a], [b]) => (a < b ? -1 : 1)));
}

function parametersOf(
  paths: Record<string, Record<string, unknown>>,
  resolve: (p: Json) => Json,
): Record<string, Json> {
  const found: Record<string, Json> = {};
  for (const [path, method] of Object.values(PARAMETER_SOURCES)) {
    const item = paths[path];
    const list = method === 'parameters' ? item?.parameters : (item?.[method] as Json | undefined)?.parameters;
    if (!Array.isArray(list)) throw new Error(`no parameters at ${method} ${path}`);
    for (const raw of list as Json[]) {
      const p = resolve(raw);
      if (typeof p.name === 'string' && p.in !== 'body') found[p.name] ??= p;
    }
  }
  const out: Record<string, Json> = {};
  for (const name of PARAMETER_NAMES) {
    const p = found[name];
    if (!p) throw new Error(`parameter ${name} not found in the Kubernetes OpenAPI document`);
    out[name] = p;
  }
  return out;
}

/**
 * `appsV3`: the v3 document of apps/v1 (it carries every meta type); `swagger`: the v2 swagger.json. The GVK lists
 * of DeleteOptions and WatchEvent are per-document upstream; the caller rewrites them for our group-version.
 */
export function extractMetaOpenApi(appsV3: Json, swagger: Json): MetaOpenApi {
  const v3Schemas = (appsV3.components as { schemas: Record<string, Json> }).schemas;
  const v2Definitions = swagger.definitions as Record<string, Json>;
  const v2Parameters = swagger.parameters as Record<string, Json>;
  const resolveV2 = (p: Json): Json => {
    const ref = p.$ref;
    if (typeof ref !== 'string') return p;
    const target = v2Parameters[ref.replace('#/parameters/', '')];
    if (!target) throw new Error(`unresolved ${ref}`);
    return target;
  };
  return {
    v3: {
      schemas: closure(v3Schemas, META_ROOTS, '#/components/schemas/'),
      parameters: parametersOf(appsV3.paths as Record<string, Record<string, unknown>>, (p) => p),
    },
    v2: {
      definitions: closure(v2Definitions, META_ROOTS, '#/definitions/'),
      parameters: parametersOf(swagger.paths as Record<string, Record<string, unknown>>, resolveV2),
    },
  };
}
