/**
 * The embedded Kubernetes core schemas (PodSpec, PersistentVolumeClaimSpec, NetworkPolicy rules), generated from
 * the kube-apiserver v1.36.3 OpenAPI document into generated/core-v1.36.gen.{json,ts} by
 * `npm run generate -- --core`. Loaded with readFileSync rather than a JSON import so the type checker does not
 * infer a type for 400 KB of schema.
 */
import { readFileSync } from 'node:fs';
import type {
  NetworkPolicyEgressRule,
  NetworkPolicyIngressRule,
  PersistentVolumeClaimSpec,
  PodSpec,
} from './generated/core-v1.36.gen.js';

export type * from './generated/core-v1.36.gen.js';

export type CoreSchemaName =
  'PodSpec' | 'PersistentVolumeClaimSpec' | 'NetworkPolicyIngressRule' | 'NetworkPolicyEgressRule';

export interface CoreTypes {
  PodSpec: PodSpec;
  PersistentVolumeClaimSpec: PersistentVolumeClaimSpec;
  NetworkPolicyIngressRule: NetworkPolicyIngressRule;
  NetworkPolicyEgressRule: NetworkPolicyEgressRule;
}

interface CoreFile {
  source: string;
  schemas: Record<CoreSchemaName, Record<string, unknown>>;
}

const file = JSON.parse(readFileSync(new URL('./generated/core-v1.36.gen.json', import.meta.url), 'utf8')) as CoreFile;

/** Where the core schemas came from (recorded in the generated file). */
export const CORE_SCHEMA_SOURCE: string = file.source;

export function coreSchema(name: CoreSchemaName): Record<string, unknown> {
  return file.schemas[name];
}
