/**
 * Renders CustomResourceDefinitions (apiextensions.k8s.io/v1) from the registry in scheme.ts. The TypeBox
 * schemas become `openAPIV3Schema` by dropping TypeBox's symbol keys and checking that only keywords a
 * structural CRD schema accepts remain, so a mistake in a schema fails generation instead of the apply.
 */
import { stringify } from 'yaml';
import { ALL_RESOURCES, crdNameOf, deprecationWarningOf, type ResourceDef, type VersionDef } from './scheme.js';

export type JsonSchemaProps = { [key: string]: unknown };

/** Where the apiserver sends ConversionReviews (docs/api.md "Conversion webhook"). */
export interface ConversionClientConfig {
  service?: { name: string; namespace: string; path?: string; port?: number };
  url?: string;
  caBundle?: string;
}

export const DEFAULT_WEBHOOK_SERVICE = {
  name: 'sandbox-webhook-service',
  namespace: 'sandbox-system',
  path: '/convert',
} as const;
export const CONVERSION_REVIEW_VERSIONS = ['v1', 'v1beta1'] as const;

const ALLOWED_KEYWORDS = new Set([
  'description',
  'type',
  'format',
  'enum',
  'default',
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
  'required',
  'properties',
  'items',
  'additionalProperties',
  'anyOf',
  'x-kubernetes-list-type',
  'x-kubernetes-list-map-keys',
  'x-kubernetes-map-type',
  'x-kubernetes-int-or-string',
  'x-kubernetes-preserve-unknown-fields',
  'x-kubernetes-embedded-resource',
  'x-kubernetes-validations',
]);

/** A TypeBox schema as a CRD JSONSchemaProps: plain JSON, sorted keys, CRD keywords only. */
export function toOpenApiV3Schema(schema: unknown, path = '<root>'): JsonSchemaProps {
  if (schema === null || typeof schema !== 'object' || Array.isArray(schema)) {
    throw new Error(`${path}: schema must be an object`);
  }
  const node = schema as Record<string, unknown>;
  const out: JsonSchemaProps = {};
  for (const key of Object.keys(node).sort()) {
    const value = node[key];
    if (value === undefined) continue;
    if (!ALLOWED_KEYWORDS.has(key))
      throw new Error(`${path}: keyword ${JSON.stringify(key)} is not allowed in a CRD schema`);
    switch (key) {
      case 'properties': {
        const props: JsonSchemaProps = {};
        for (const name of Object.keys(value as object).sort()) {
          props[name] = toOpenApiV3Schema((value as Record<string, unknown>)[name], `${path}.${name}`);
        }
        out[key] = props;
        break;
      }
      case 'items':
      case 'additionalProperties':
        out[key] = typeof value === 'boolean' ? value : toOpenApiV3Schema(value, `${path}[${key}]`);
        break;
      case 'anyOf':
        if (node['x-kubernetes-int-or-string'] !== true)
          throw new Error(`${path}: anyOf only with x-kubernetes-int-or-string`);
        out[key] = (value as unknown[]).map((v, i) => toOpenApiV3Schema(v, `${path}.anyOf[${i}]`));
        break;
      case 'required':
        if ((value as unknown[]).length > 0) out[key] = [...(value as string[])].sort();
        break;
      default:
        out[key] = sortedKeys(value);
    }
  }
  return out;
}

/** A deep copy with object keys sorted (stable YAML, key order never matters to the apiserver). */
function sortedKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortedKeys);
  if (value === null || typeof value !== 'object') return value;
  const out: Record<string, unknown> = {};
  for (const k of Object.keys(value).sort()) out[k] = sortedKeys((value as Record<string, unknown>)[k]);
  return out;
}

function renderVersion(resource: ResourceDef, v: VersionDef): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (v.printerColumns.length > 0) out['additionalPrinterColumns'] = v.printerColumns.map((c) => ({ ...c }));
  if (v.deprecated) {
    out['deprecated'] = true;
    out['deprecationWarning'] = deprecationWarningOf(resource, v.name);
  }
  out['name'] = v.name;
  out['schema'] = { openAPIV3Schema: toOpenApiV3Schema(v.schema, `${resource.kind}/${v.name}`) };
  out['served'] = v.served;
  out['storage'] = v.storage;
  const sub: Record<string, unknown> = {};
  if (v.subresources.scale) sub['scale'] = { ...v.subresources.scale };
  if (v.subresources.status) sub['status'] = {};
  if (Object.keys(sub).length > 0) out['subresources'] = sub;
  return out;
}

export interface CrdOptions {
  /**
   * Conversion webhook client config; defaults to the in-cluster Service DEFAULT_WEBHOOK_SERVICE without a caBundle.
   */
  conversionClientConfig?: ConversionClientConfig;
  /**
   * Only v1beta1, served and stored, and no conversion stanza (docs/api.md "Migrating to v1beta1"): the apiserver
   * then never calls a conversion webhook and keeps one watch cache per kind. Objects stored as v1alpha1 must have
   * been rewritten as v1beta1 first: once v1alpha1 is gone from `spec.versions` they cannot be read.
   */
  v1beta1Only?: boolean;
}

/** The only version a v1beta1-only CRD lists (the hub every conversion goes through). */
export const HUB_VERSION = 'v1beta1';

export function buildCrd(resource: ResourceDef, opts: CrdOptions = {}): Record<string, unknown> {
  const spec: Record<string, unknown> = {
    group: resource.group,
    names: {
      kind: resource.kind,
      listKind: resource.listKind,
      plural: resource.plural,
      ...(resource.shortNames.length > 0 ? { shortNames: [...resource.shortNames] } : {}),
      singular: resource.singular,
    },
    scope: resource.scope,
    versions: versionsOf(resource, opts).map((v) => renderVersion(resource, v)),
  };
  if (resource.conversion === 'Webhook' && !opts.v1beta1Only) {
    const clientConfig = structuredClone(opts.conversionClientConfig ?? { service: { ...DEFAULT_WEBHOOK_SERVICE } });
    spec['conversion'] = {
      strategy: 'Webhook',
      webhook: { clientConfig, conversionReviewVersions: [...CONVERSION_REVIEW_VERSIONS] },
    };
  }
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: crdNameOf(resource) },
    spec,
  };
}

function versionsOf(resource: ResourceDef, opts: CrdOptions): VersionDef[] {
  if (!opts.v1beta1Only) return [...resource.versions];
  const hub = resource.versions.find((v) => v.name === HUB_VERSION);
  if (!hub?.storage) throw new Error(`${resource.kind}: ${HUB_VERSION} is not its storage version`);
  return [{ ...hub, served: true }];
}

export function buildAllCrds(opts: CrdOptions = {}): Record<string, unknown>[] {
  return ALL_RESOURCES.map((r) => buildCrd(r, opts));
}

/** File name under deploy/crds: `<group>_<plural>.yaml` (as the reference CRDs are named). */
export function crdFileName(resource: ResourceDef): string {
  return `${resource.group}_${resource.plural}.yaml`;
}

const HEADER = '# Code generated by `npm run generate` (scripts/generate.ts) from src/api. DO NOT EDIT.\n';

/** File name -> YAML content, exactly what `npm run generate` writes to deploy/crds. */
export function renderCrdFiles(): Record<string, string> {
  const files: Record<string, string> = {};
  for (const r of ALL_RESOURCES) {
    files[crdFileName(r)] = `${HEADER}${stringify(buildCrd(r), { lineWidth: 0, aliasDuplicateObjects: false })}`;
  }
  return files;
}
