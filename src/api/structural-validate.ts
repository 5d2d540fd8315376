/**
 * Validation of an object against a structural schema (the `openAPIV3Schema` our TypeBox types render to, crd.ts),
 * as kube-apiserver validates custom resources: types, required fields, enums, bounds and patterns, with field
 * paths in Kubernetes form (`spec.podTemplate.spec.containers[0].image`), and the unknown fields it would prune,
 * which a `fieldValidation=Strict` request turns into an error. Used by servers that hold no CRD but serve the same
 * kinds (sandbox-apiserver), so both layouts accept and reject the same objects. CEL rules are not evaluated here.
 */
import type { JsonSchemaProps } from './crd.js';

export interface FieldError {
  field: string;
  /** apimachinery field.ErrorType: FieldValueRequired, FieldValueInvalid, FieldValueNotSupported, FieldValueTypeInvalid. */
  reason: string;
  message: string;
}

export interface StructuralResult {
  errors: FieldError[];
  /** Paths of fields the schema does not know (pruned, or rejected under Strict). */
  unknown: string[];
}

const join = (path: string, key: string) => (path ? `${path}.${key}` : key);

function typeOf(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  if (typeof v === 'number') return Number.isInteger(v) ? 'integer' : 'number';
  return typeof v;
}

const DATE_TIME = /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/;

function walk(schema: JsonSchemaProps, v: unknown, path: string, out: StructuralResult): void {
  if (v === null) {
    if (schema.nullable) return;
    // kube-apiserver drops nulls for non-nullable fields rather than failing (pruning); so do we.
    return;
  }
  if (schema['x-kubernetes-int-or-string']) {
    const t = typeOf(v);
    if (t !== 'integer' && t !== 'string')
      out.errors.push({
        field: path,
        reason: 'FieldValueTypeInvalid',
        message: `Invalid value: "${t}": ${path} in body must be of type integer-or-string`,
      });
    return;
  }
  const expected = schema.type as string | undefined;
  const actual = typeOf(v);
  if (expected && !(expected === actual || (expected === 'number' && actual === 'integer'))) {
    out.errors.push({
      field: path,
      reason: 'FieldValueTypeInvalid',
      message: `Invalid value: "${actual}": ${path || 'body'} in body must be of type ${expected}`,
    });
    return;
  }
  if (Array.isArray(schema.enum) && !schema.enum.includes(v))
    out.errors.push({
      field: path,
      reason: 'FieldValueNotSupported',
      message: `Unsupported value: ${JSON.stringify(v)}: supported values: ${schema.enum.map((e) => JSON.stringify(e)).join(', ')}`,
    });
  if (typeof v === 'string') {
    if (typeof schema.maxLength === 'number' && v.length > schema.maxLength)
      out.errors.push({
        field: path,
        reason: 'FieldValueTooLong',
        message: `Too long: may not be more than ${schema.maxLength} bytes`,
      });
    if (typeof schema.minLength === 'number' && v.length < schema.minLength)
      out.errors.push({
        field: path,
        reason: 'FieldValueInvalid',
        message: `Invalid value: ${JSON.stringify(v)}: ${path} in body should be at least ${schema.minLength} chars long`,
      });
    if (typeof schema.pattern === 'string' && !new RegExp(schema.pattern, 'u').test(v))
      out.errors.push({
        field: path,
        reason: 'FieldValueInvalid',
        message: `Invalid value: ${JSON.stringify(v)}: ${path} in body should match '${schema.pattern}'`,
      });
    if (schema.format === 'date-time' && !DATE_TIME.test(v))
      out.errors.push({
        field: path,
        reason: 'FieldValueInvalid',
        message: `Invalid value: ${JSON.stringify(v)}: ${path} in body must be of type date-time`,
      });
  }
  if (typeof v === 'number') {
    if (typeof schema.minimum === 'number' && v < schema.minimum)
      out.errors.push({
        field: path,
        reason: 'FieldValueInvalid',
        message: `Invalid value: ${v}: ${path} in body should be greater than or equal to ${schema.minimum}`,
      });
    if (typeof schema.maximum === 'number' && v > schema.maximum)
      out.errors.push({
        field: path,
        reason: 'FieldValueInvalid',
        message: `Invalid value: ${v}: ${path} in body should be less than or equal to ${schema.maximum}`,
      });
  }
  if (Array.isArray(v)) {
    if (typeof schema.maxItems === 'number' && v.length > schema.maxItems)
      out.errors.push({
        field: path,
        reason: 'FieldValueTooMany',
        message: `Too many: ${v.length}: must have at most ${schema.maxItems} items`,
      });
    const items = schema.items as JsonSchemaProps | undefined;
    if (items) v.forEach((item, i) => walk(items, item, `${path}[${i}]`, out));
    return;
  }
  if (actual !== 'object') return;
  const obj = v as Record<string, unknown>;
  const props = schema.properties as Record<string, JsonSchemaProps> | undefined;
  const additional = schema.additionalProperties as JsonSchemaProps | boolean | undefined;
  for (const req of (schema.required as string[] | undefined) ?? [])
    if (obj[req] === undefined || obj[req] === null)
      out.errors.push({ field: join(path, req), reason: 'FieldValueRequired', message: 'Required value' });
  for (const [k, val] of Object.entries(obj)) {
    const child = props?.[k];
    if (child) walk(child, val, join(path, k), out);
    else if (additional && typeof additional === 'object') walk(additional, val, `${path}[${k}]`, out);
    else if (!additional && !schema['x-kubernetes-preserve-unknown-fields'] && props) out.unknown.push(join(path, k));
  }
}

/**
 * Validate `value` against `schema`. `metadata` at the root is left to the caller (kube-apiserver validates
 * ObjectMeta itself, not through the CRD schema).
 */
export function validateStructural(schema: JsonSchemaProps, value: unknown): StructuralResult {
  const out: StructuralResult = { errors: [], unknown: [] };
  walk(schema, value, '', out);
  return out;
}
