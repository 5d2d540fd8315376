/**
 * Small TypeBox vocabulary for Kubernetes CRD schemas. Everything returned here is a TypeBox schema whose JSON
 * keywords are legal in a CRD `openAPIV3Schema` (crd.ts rejects anything else), and whose `Static` type is the
 * wire type.
 */
import { Type, type TSchema, type TUnsafe, type SchemaOptions } from '@sinclair/typebox';

export interface K8sOptions extends SchemaOptions {
  'x-kubernetes-list-type'?: 'atomic' | 'set' | 'map';
  'x-kubernetes-list-map-keys'?: string[];
  'x-kubernetes-map-type'?: 'atomic' | 'granular';
  'x-kubernetes-validations'?: {
    rule: string;
    message?: string;
    messageExpression?: string;
    reason?: string;
    fieldPath?: string;
  }[];
  'x-kubernetes-preserve-unknown-fields'?: boolean;
}

export const Str = (opts: SchemaOptions = {}) => Type.String(opts);

export const DateTime = (opts: SchemaOptions = {}) => Type.String({ ...opts, format: 'date-time' });

export const Int32 = (opts: SchemaOptions = {}) => Type.Integer({ ...opts, format: 'int32' });

export const Int64 = (opts: SchemaOptions = {}) => Type.Integer({ ...opts, format: 'int64' });

/** An integer without a format (NodeInventory's `warm`/`target`, as in the reference). */
export const Int = (opts: SchemaOptions = {}) => Type.Integer(opts);

export const Bool = (opts: SchemaOptions = {}) => Type.Boolean(opts);

/** A string restricted to `values`, typed as their union. */
export function StringEnum<const T extends readonly string[]>(values: T, opts: SchemaOptions = {}): TUnsafe<T[number]> {
  return Type.Unsafe<T[number]>({ ...opts, type: 'string', enum: [...values] });
}

/** `map[string]string`. */
export const StringMap = (opts: SchemaOptions = {}): TUnsafe<Record<string, string>> =>
  Type.Unsafe<Record<string, string>>({ ...opts, type: 'object', additionalProperties: { type: 'string' } });

/** An array with Kubernetes list markers. */
export const List = <T extends TSchema>(items: T, opts: K8sOptions = {}) => Type.Array(items, opts);

/** A raw (already structural) schema with a given TS type, e.g. an embedded core type. */
export const Raw = <T>(schema: Record<string, unknown>): TUnsafe<T> => Type.Unsafe<T>(structuredClone(schema));
