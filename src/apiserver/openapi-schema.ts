/**
 * The schemas of sandbox-apiserver's OpenAPI documents. Our kinds come from the descriptors' TypeBox schemas (the
 * same source as the CRDs, made plain JSON by src/api's toOpenApiV3Schema), with `metadata` pointing at the
 * canonical ObjectMeta and apiVersion/kind described as in every built-in kind; the meta.k8s.io types they
 * reference are kube-apiserver's own (generated/meta-v1.36.gen.json, see scripts/openapi-meta.ts).
 *
 * v2 is what kubectl validates `kubectl create -f` against, after kube-apiserver has parsed our JSON (go-openapi),
 * re-serialized it and parsed it again with gnostic into protobuf. Gnostic rejects any schema keyword Swagger 2.0
 * does not have (anyOf, nullable...), and that would break /openapi/v2 for the whole cluster; kubectl's validator
 * (kube-openapi pkg/util/proto) rejects unknown fields of any schema with `properties` and needs `items` on
 * arrays. {@link toSwaggerSchema} therefore rewrites a v3 schema as apiextensions-apiserver's
 * ToStructuralOpenAPIV2 does for CRDs.
 */
import { readFileSync } from 'node:fs';
import { toOpenApiV3Schema } from '../api/index.js';
import type { GroupVersionKind } from './discovery.js';

export type Json = { [key: string]: unknown };

export const META = 'io.k8s.apimachinery.pkg.apis.meta.v1';
export const V3_PREFIX = '#/components/schemas/';
export const V2_PREFIX = '#/definitions/';

interface MetaFile {
  source: string;
  v3: { schemas: Record<string, Json>; parameters: Record<string, Json> };
  v2: { definitions: Record<string, Json>; parameters: Record<string, Json> };
}

const meta = JSON.parse(readFileSync(new URL('./generated/meta-v1.36.gen.json', import.meta.url), 'utf8')) as MetaFile;

/** Where the meta schemas came from (recorded in the generated file). */
export const META_SCHEMA_SOURCE: string = meta.source;

export type OpenApiVersion = 'v2' | 'v3';

/** A standard parameter (labelSelector, dryRun, namespace...) exactly as kube-apiserver publishes it. */
export function standardParameter(version: OpenApiVersion, name: string): Json {
  const p = (version === 'v3' ? meta.v3 : meta.v2).parameters[name];
  if (!p) throw new Error(`no standard parameter ${name}`);
  return structuredClone(p);
}

/** DeleteOptions and WatchEvent are registered in every group-version; upstream lists them per document. */
const PER_GROUP_VERSION = new Set([`${META}.DeleteOptions`, `${META}.WatchEvent`]);

/** The meta.k8s.io schemas (v3) or definitions (v2), with our group-versions added where upstream has its own. */
export function metaSchemas(
  version: OpenApiVersion,
  gvs: readonly { group: string; version: string }[],
): Record<string, Json> {
  const source = version === 'v3' ? meta.v3.schemas : meta.v2.definitions;
  const out: Record<string, Json> = {};
  for (const [name, schema] of Object.entries(source)) {
    const copy = structuredClone(schema);
    if (PER_GROUP_VERSION.has(name)) {
      const kind = name.slice(META.length + 1);
      copy['x-kubernetes-group-version-kind'] = [
        { group: '', kind, version: 'v1' },
        ...gvs.map((gv) => ({ group: gv.group, kind, version: gv.version })),
      ];
    }
    out[name] = copy;
  }
  return out;
}

/** apiextensions-apiserver's model name: the group reversed, then version and kind (io.x-k8s.agents.v1beta1.Sandbox). */
export function modelName(gvk: GroupVersionKind): string {
  if (gvk.kind === 'Status') return `${META}.Status`;
  return `${gvk.group.split('.').reverse().join('.')}.${gvk.version}.${gvk.kind}`;
}

/** TypeMeta and list metadata, as every built-in kind describes them (Status has both inline). */
const typeMeta = (() => {
  const p = meta.v3.schemas[`${META}.Status`]?.properties as Record<string, Json | undefined> | undefined;
  if (!p?.apiVersion || !p.kind || !p.metadata) throw new Error('generated/meta-v1.36.gen.json lacks Status');
  return { apiVersion: p.apiVersion, kind: p.kind, listMetadata: p.metadata };
})();

/** A `$ref` with its own description and default, the way OpenAPI 3.0 allows siblings of a reference. */
function refTo(name: string, description: string): Json {
  return { allOf: [{ $ref: `${V3_PREFIX}${name}` }], default: {}, description };
}

const OBJECT_METADATA =
  "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/**
 * The v3 schema of one of our kinds: the TypeBox schema as plain JSON, its TypeMeta fields described as upstream,
 * its `metadata` a reference to ObjectMeta, and the GVK that kubectl explain looks the model up by. Only fields
 * the schema declares are there (the server decodes bodies by the same schema); a served resource's kind must
 * declare `metadata`.
 */
export function kindSchema(schema: unknown, gvk: GroupVersionKind, description: string, served: boolean): Json {
  const where = `${gvk.group}/${gvk.version} ${gvk.kind}`;
  const out = toOpenApiV3Schema(schema, where);
  const properties = out.properties as Record<string, Json> | undefined;
  if (out.type !== 'object' || !properties)
    throw new Error(`${where}: a kind's schema must be an object with properties`);
  if (served && !properties.metadata) throw new Error(`${where}: a served resource's schema needs metadata`);
  const standard: Record<string, Json> = {
    apiVersion: typeMeta.apiVersion,
    kind: typeMeta.kind,
    metadata: refTo(`${META}.ObjectMeta`, OBJECT_METADATA),
  };
  for (const [name, replacement] of Object.entries(standard)) {
    if (properties[name]) properties[name] = structuredClone(replacement);
  }
  if (description && out.description === undefined) out.description = description;
  out['x-kubernetes-group-version-kind'] = [{ group: gvk.group, kind: gvk.kind, version: gvk.version }];
  return out;
}

/** The v3 schema of a list kind, shaped as apiextensions-apiserver builds it for CRDs. */
export function listSchema(item: GroupVersionKind, listKind: string, plural: string): Json {
  return {
    description: `${listKind} is a list of ${item.kind}`,
    properties: {
      apiVersion: structuredClone(typeMeta.apiVersion),
      items: {
        description: `List of ${plural}. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md`,
        items: { $ref: `${V3_PREFIX}${modelName(item)}` },
        type: 'array',
      },
      kind: structuredClone(typeMeta.kind),
      metadata: structuredClone(typeMeta.listMetadata),
    },
    required: ['items'],
    type: 'object',
    'x-kubernetes-group-version-kind': [{ group: item.group, kind: listKind, version: item.version }],
  };
}

/** Swagger 2.0 keywords kept by {@link toSwaggerSchema}; anything else but `x-` extensions is dropped. */
const SWAGGER_KEYWORDS = new Set([
  '$ref',
  'additionalProperties',
  'default',
  'description',
  'enum',
  'example',
  'exclusiveMaximum',
  'exclusiveMinimum',
  'format',
  'items',
  'maxItems',
  'maxLength',
  'maxProperties',
  'maximum',
  'minItems',
  'minLength',
  'minProperties',
  'minimum',
  'multipleOf',
  'pattern',
  'properties',
  'readOnly',
  'required',
  'title',
  'type',
  'uniqueItems',
]);

/**
 * A v3 schema as kubectl's v2 validator can take it (apiextensions-apiserver's ToStructuralOpenAPIV2, plus the
 * reference forms): `allOf: [$ref]` becomes the `$ref` (with its description), junctors (anyOf for
 * int-or-string) go, so an int-or-string has no type and accepts both; a nullable field loses its type and is no
 * longer required; a preserve-unknown-fields object and an object that also allows additional properties lose
 * their `properties` (kubectl would reject every other field), and an array without items loses its type.
 */
export function toSwaggerSchema(v3: Json): Json {
  const allOf = v3.allOf;
  if (Array.isArray(allOf) && allOf.length === 1 && typeof (allOf[0] as Json).$ref === 'string') {
    const ref = { $ref: ((allOf[0] as Json).$ref as string).replace(V3_PREFIX, V2_PREFIX) };
    return typeof v3.description === 'string' ? { ...ref, description: v3.description } : ref;
  }
  const out: Json = {};
  for (const [key, value] of Object.entries(v3)) {
    if (!SWAGGER_KEYWORDS.has(key) && !key.startsWith('x-')) continue;
    if (key === '$ref') out[key] = (value as string).replace(V3_PREFIX, V2_PREFIX);
    else if (key === 'properties') {
      const props: Json = {};
      for (const [name, sub] of Object.entries(value as Record<string, Json>)) props[name] = toSwaggerSchema(sub);
      out[key] = props;
    } else if ((key === 'items' || key === 'additionalProperties') && typeof value === 'object' && value !== null) {
      out[key] = toSwaggerSchema(value as Json);
    } else out[key] = structuredClone(value);
  }
  if (v3.nullable === true) for (const k of ['type', 'items', 'properties', 'additionalProperties']) delete out[k];
  if (v3['x-kubernetes-preserve-unknown-fields'] === true) {
    delete out.items;
    delete out.properties;
    if (out.type === 'object') delete out.type;
  }
  if (out.properties && out.additionalProperties !== undefined && out.additionalProperties !== false) {
    delete out.properties;
  }
  if (out.type === 'array' && out.items === undefined) delete out.type;
  if (Array.isArray(out.required)) {
    // Without properties kubectl sees a map and ignores `required`; a nullable field may be sent as null.
    const props = out.properties ? (v3.properties as Record<string, Json>) : {};
    const required = (out.required as string[]).filter((f) => props[f] !== undefined && props[f].nullable !== true);
    if (required.length > 0) out.required = required;
    else delete out.required;
  }
  return out;
}

/** Every `$ref` in `doc` that does not name an entry of its schemas/definitions (empty when all resolve). */
export function unresolvedRefs(doc: Json): string[] {
  const components = (doc.components as Json | undefined)?.schemas as Json | undefined;
  const targets = components ?? (doc.definitions as Json | undefined) ?? {};
  const prefix = components ? V3_PREFIX : V2_PREFIX;
  const missing = new Set<string>();
  const walk = (node: unknown): void => {
    if (Array.isArray(node)) node.forEach(walk);
    else if (node !== null && typeof node === 'object') {
      for (const [k, v] of Object.entries(node)) {
        if (k === '$ref' && typeof v === 'string') {
          if (!v.startsWith(prefix) || !(v.slice(prefix.length) in targets)) missing.add(v);
        } else walk(v);
      }
    }
  };
  walk(doc);
  return [...missing].sort();
}
