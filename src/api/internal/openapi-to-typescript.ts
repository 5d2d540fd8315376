/**
 * Emits TypeScript interfaces for Kubernetes OpenAPI v3 component schemas reachable from a set of roots, so the
 * embedded core types (PodSpec, PersistentVolumeClaimSpec, NetworkPolicy rules) are typed from the same
 * document their CRD schema comes from, not by hand. Pure; scripts/generate.ts writes the result.
 */
import type { JsonSchema } from './openapi-to-structural.js';

const SPECIAL_TS: Record<string, string> = {
  'io.k8s.apimachinery.pkg.api.resource.Quantity': 'string | number',
  'io.k8s.apimachinery.pkg.util.intstr.IntOrString': 'number | string',
  'io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta': 'EmbeddedObjectMeta',
  'io.k8s.apimachinery.pkg.apis.meta.v1.Time': 'string',
  'io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime': 'string',
};

export function toTypeScript(
  components: Readonly<Record<string, JsonSchema>>,
  roots: readonly string[],
  header: string,
): string {
  const names = new Map<string, string>();
  const used = new Set<string>(['EmbeddedObjectMeta']);
  const nameOf = (def: string): string => {
    const known = names.get(def);
    if (known) return known;
    const parts = def.split('.');
    let name = parts[parts.length - 1]!;
    if (used.has(name))
      name = `${parts[parts.length - 3] ?? ''}${parts[parts.length - 2] ?? ''}${name}`.replace(/^./, (c) =>
        c.toUpperCase(),
      );
    used.add(name);
    names.set(def, name);
    return name;
  };

  const queue = [...roots];
  const emitted = new Set<string>();
  const out: string[] = [
    header,
    '',
    '/** Kubernetes ObjectMeta inside an embedded template; only the common fields are typed. */',
    'export interface EmbeddedObjectMeta {',
    '  name?: string;',
    '  namespace?: string;',
    '  labels?: Record<string, string>;',
    '  annotations?: Record<string, string>;',
    '  [key: string]: unknown;',
    '}',
    '',
  ];

  const typeOf = (node: JsonSchema): string => {
    const ref = refOf(node);
    if (ref !== undefined) {
      const special = SPECIAL_TS[ref];
      if (special) return special;
      if (!emitted.has(ref)) queue.push(ref);
      return nameOf(ref);
    }
    if (Array.isArray(node['enum'])) return (node['enum'] as unknown[]).map((v) => JSON.stringify(v)).join(' | ');
    switch (node['type']) {
      case 'string':
        return 'string';
      case 'integer':
      case 'number':
        return 'number';
      case 'boolean':
        return 'boolean';
      case 'array': {
        const inner = typeOf(node['items'] as JsonSchema);
        return inner.includes('|') ? `Array<${inner}>` : `${inner}[]`;
      }
      case 'object':
        if (node['additionalProperties'] && typeof node['additionalProperties'] === 'object') {
          return `Record<string, ${typeOf(node['additionalProperties'] as JsonSchema)}>`;
        }
        return 'Record<string, unknown>';
      default:
        return 'unknown';
    }
  };

  while (queue.length > 0) {
    const def = queue.shift()!;
    if (emitted.has(def) || SPECIAL_TS[def]) continue;
    emitted.add(def);
    const schema = components[def];
    if (!schema) throw new Error(`OpenAPI definition ${def} not found`);
    const required = new Set((schema['required'] as string[] | undefined) ?? []);
    const desc = typeof schema['description'] === 'string' ? firstSentence(schema['description']) : undefined;
    if (desc) out.push(`/** ${desc} */`);
    out.push(`export interface ${nameOf(def)} {`);
    for (const [prop, sub] of Object.entries((schema['properties'] as Record<string, JsonSchema> | undefined) ?? {})) {
      out.push(
        `  ${/^[A-Za-z_$][\w$]*$/.test(prop) ? prop : JSON.stringify(prop)}${required.has(prop) ? '' : '?'}: ${typeOf(sub)};`,
      );
    }
    out.push('}', '');
  }
  return out.join('\n');
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

function firstSentence(text: string): string {
  const line = text.split('\n')[0] ?? '';
  const dot = line.indexOf('. ');
  return (dot > 0 ? line.slice(0, dot + 1) : line).replace(/\*\//g, '*\\/');
}
