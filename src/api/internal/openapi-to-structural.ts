/**
 * Turns the Kubernetes OpenAPI v3 component schemas (as served by kube-apiserver under /openapi/v3, and checked in
 * as k8s.io/kubernetes/api/openapi-spec/v3) into self-contained *structural* CRD schemas.
 *
 * Why not copy the OpenAPI verbatim: a CRD schema cannot `$ref`, and openapi-gen emits an implicit zero-value
 * `default` (`{}`, `""`, `0`) for every non-pointer Go field. In a CRD those would be applied by the apiserver
 * (a container without a name would be defaulted to `name: ""` and pass `required`), so only the defaults the Go
 * types declare with a `+default=` marker are kept. That marker set, and the `+structType=atomic` that
 * controller-gen inherits from inline-embedded structs (e.g. `ConfigMapEnvSource` embeds the atomic
 * `LocalObjectReference`), come from the Go sources of k8s.io/api, parsed by {@link parseGoMarkers}.
 *
 * Pure functions only: reading files is the caller's job (scripts/generate.ts).
 */

export type JsonSchema = { [key: string]: unknown };

/** What the Go sources say beyond the OpenAPI document. */
export interface GoMarkers {
  /** `Type.jsonField` for every field carrying `+default=` (after following inline embeds). */
  readonly defaultedFields: ReadonlySet<string>;
  /** Types that are `+structType=atomic` themselves or embed such a type inline. */
  readonly atomicTypes: ReadonlySet<string>;
}

/** controller-gen's pattern for resource.Quantity strings. */
export const QUANTITY_PATTERN =
  '^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$';

const SPECIAL: Record<string, () => JsonSchema> = {
  'io.k8s.apimachinery.pkg.api.resource.Quantity': () => ({
    anyOf: [{ type: 'integer' }, { type: 'string' }],
    pattern: QUANTITY_PATTERN,
    'x-kubernetes-int-or-string': true,
  }),
  'io.k8s.apimachinery.pkg.util.intstr.IntOrString': () => ({
    anyOf: [{ type: 'integer' }, { type: 'string' }],
    'x-kubernetes-int-or-string': true,
  }),
  'io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta': () => ({ type: 'object' }),
  'io.k8s.apimachinery.pkg.apis.meta.v1.Time': () => ({ type: 'string', format: 'date-time' }),
  'io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime': () => ({ type: 'string', format: 'date-time' }),
};

/** Keywords copied from an OpenAPI schema node into the CRD schema (everything else is dropped). */
const KEPT_SCALARS = [
  'description',
  'type',
  'format',
  'enum',
  'pattern',
  'minimum',
  'maximum',
  'exclusiveMinimum',
  'exclusiveMaximum',
  'minLength',
  'maxLength',
  'minItems',
  'maxItems',
  'minProperties',
  'maxProperties',
  'uniqueItems',
  'nullable',
  'x-kubernetes-list-type',
  'x-kubernetes-list-map-keys',
  'x-kubernetes-map-type',
  'x-kubernetes-int-or-string',
  'x-kubernetes-preserve-unknown-fields',
  'x-kubernetes-embedded-resource',
  'x-kubernetes-validations',
] as const;

export interface ConvertOptions {
  /** Keep `description` texts (kubectl explain); default true. */
  descriptions?: boolean;
}

/**
 * Resolves `definition` (a key of `components.schemas`) into one structural schema.
 */
export function toStructural(
  components: Readonly<Record<string, JsonSchema>>,
  definition: string,
  markers: GoMarkers,
  opts: ConvertOptions = {},
): JsonSchema {
  const keepDescriptions = opts.descriptions ?? true;
  const stack: string[] = [];

  const resolveDef = (name: string): JsonSchema => {
    const special = SPECIAL[name];
    if (special) return special();
    const def = components[name];
    if (!def) throw new Error(`OpenAPI definition ${name} not found`);
    if (stack.includes(name)) throw new Error(`recursive OpenAPI definition ${[...stack, name].join(' -> ')}`);
    stack.push(name);
    try {
      return convertNode(def, name);
    } finally {
      stack.pop();
    }
  };

  /** `owner` is the definition whose properties we are converting (for marker look-ups). */
  const convertNode = (node: JsonSchema, owner: string | undefined): JsonSchema => {
    const ref = refOf(node);
    if (ref !== undefined) {
      // `allOf: [{$ref}]` plus sibling keys (description) as openapi-gen emits for named fields.
      const resolved = resolveDef(ref);
      const out: JsonSchema = { ...resolved };
      if (keepDescriptions && typeof node['description'] === 'string') out['description'] = node['description'];
      return out;
    }
    const out: JsonSchema = {};
    for (const key of KEPT_SCALARS) {
      if (node[key] === undefined) continue;
      if (key === 'description' && !keepDescriptions) continue;
      if (key === 'format' && node[key] === 'int-or-string') continue;
      out[key] = node[key];
    }
    if (node['items'] !== undefined) out['items'] = convertNode(node['items'] as JsonSchema, undefined);
    if (node['additionalProperties'] !== undefined && typeof node['additionalProperties'] === 'object') {
      out['additionalProperties'] = convertNode(node['additionalProperties'] as JsonSchema, undefined);
    }
    if (node['properties'] !== undefined) {
      const props: JsonSchema = {};
      const shortOwner = owner === undefined ? undefined : shortName(owner);
      for (const [prop, sub] of Object.entries(node['properties'] as Record<string, JsonSchema>)) {
        const converted = convertNode(sub, undefined);
        delete converted['default'];
        const explicitDefault = shortOwner !== undefined && markers.defaultedFields.has(`${shortOwner}.${prop}`);
        const raw = sub['default'];
        if (explicitDefault && raw !== undefined) converted['default'] = raw;
        props[prop] = converted;
      }
      out['properties'] = props;
      if (
        owner !== undefined &&
        markers.atomicTypes.has(shortName(owner)) &&
        out['x-kubernetes-map-type'] === undefined
      ) {
        out['x-kubernetes-map-type'] = 'atomic';
      }
    }
    if (Array.isArray(node['required']) && node['required'].length > 0) {
      out['required'] = [...(node['required'] as string[])].sort();
    }
    return orderKeys(out);
  };

  return resolveDef(definition);
}

function refOf(node: JsonSchema): string | undefined {
  const direct = node['$ref'];
  if (typeof direct === 'string') return direct.split('/').pop();
  const allOf = node['allOf'];
  if (Array.isArray(allOf) && allOf.length === 1) {
    const inner = (allOf[0] as JsonSchema)['$ref'];
    if (typeof inner === 'string') return inner.split('/').pop();
  }
  return undefined;
}

function shortName(definition: string): string {
  return definition.slice(definition.lastIndexOf('.') + 1);
}

/** Sorted keys, so the generated file is stable and diffs stay small. */
function orderKeys(node: JsonSchema): JsonSchema {
  const out: JsonSchema = {};
  for (const key of Object.keys(node).sort()) out[key] = node[key];
  return out;
}

/**
 * Reads `+default=` and `+structType=atomic` markers from Go source files of k8s.io/api. A deliberately small
 * parser: top-level `type X struct { ... }` blocks, their field lines with a `json:"name"` tag, inline embeds
 * (`Embedded \`json:",inline"\``) and the comment lines right above a field or type.
 */
export function parseGoMarkers(sources: readonly string[]): GoMarkers {
  const ownDefaults = new Map<string, Set<string>>();
  const embeds = new Map<string, string[]>();
  const atomic = new Set<string>();
  for (const source of sources) {
    const lines = source.split('\n');
    let comments: string[] = [];
    let current: string | undefined;
    for (const line of lines) {
      const trimmed = line.trim();
      if (trimmed.startsWith('//')) {
        comments.push(trimmed);
        continue;
      }
      const typeMatch = /^type (\w+) struct \{/.exec(line);
      if (typeMatch) {
        current = typeMatch[1]!;
        if (comments.some((c) => c.includes('+structType=atomic'))) atomic.add(current);
        ownDefaults.set(current, ownDefaults.get(current) ?? new Set());
        comments = [];
        continue;
      }
      if (current !== undefined && line.startsWith('}')) {
        current = undefined;
        comments = [];
        continue;
      }
      if (current !== undefined) {
        const embed = /^\s*(?:\w+\.)?(\w+)\s+`json:",inline"/.exec(line);
        if (embed) {
          const list = embeds.get(current) ?? [];
          list.push(embed[1]!);
          embeds.set(current, list);
        } else {
          const field = /^\s*\w+\s+\S+\s+`json:"([^",]+)/.exec(line);
          // `+default=ref(GoConstant)` is skipped: controller-gen, which generates upstream's CRDs, does not resolve
          // it, so upstream's CRDs carry no such default (azureDisk.cachingMode and .kind), and a stored object must
          // not carry values upstream's would not (reference-parity.test.ts compares defaults both ways).
          if (field && comments.some((c) => c.startsWith('// +default=') && !c.startsWith('// +default=ref(')))
            ownDefaults.get(current)!.add(field[1]!);
        }
      }
      if (trimmed !== '') comments = [];
    }
  }
  const defaultedFields = new Set<string>();
  const collect = (type: string, into: string, seen: Set<string>): void => {
    if (seen.has(type)) return;
    seen.add(type);
    for (const f of ownDefaults.get(type) ?? []) defaultedFields.add(`${into}.${f}`);
    for (const e of embeds.get(type) ?? []) collect(e, into, seen);
  };
  const isAtomic = (type: string, seen: Set<string>): boolean => {
    if (atomic.has(type)) return true;
    if (seen.has(type)) return false;
    seen.add(type);
    return (embeds.get(type) ?? []).some((e) => isAtomic(e, seen));
  };
  const atomicTypes = new Set<string>();
  for (const type of ownDefaults.keys()) {
    collect(type, type, new Set());
    if (isAtomic(type, new Set())) atomicTypes.add(type);
  }
  return { defaultedFields, atomicTypes };
}
