/**
 * The agent-sandbox API: types, schemas, the scheme registry, well-known keys, the hash convention, CRD
 * rendering and v1alpha1 <-> v1beta1 conversion. The only import surface of src/api.
 */
export * from './keys.js';
export { fnv1a32 } from './hash.js';
export type { ObjectMeta, OwnerReference, KubeObject } from './meta.js';
export { kubeTime } from './meta.js';
export * from './scheme.js';
export * from './common.js';
export * from './sandbox.js';
export * from './sandbox-template.js';
export * from './sandbox-warm-pool.js';
export * from './sandbox-claim.js';
export * from './node-inventory.js';
export * from './sandbox-lifecycle.js';
export * from './snapshot-name.js';
export { CORE_SCHEMA_SOURCE, type CoreSchemaName, type CoreTypes } from './core.js';
export type {
  PodSpec,
  Container,
  PersistentVolumeClaimSpec,
  NetworkPolicyIngressRule,
  NetworkPolicyEgressRule,
  Volume,
  EnvVar as CoreEnvVar,
} from './generated/core-v1.36.gen.js';
export {
  buildCrd,
  buildAllCrds,
  crdFileName,
  renderCrdFiles,
  toOpenApiV3Schema,
  DEFAULT_WEBHOOK_SERVICE,
  CONVERSION_REVIEW_VERSIONS,
  type ConversionClientConfig,
  type CrdOptions,
  type JsonSchemaProps,
} from './crd.js';
export * from './conversion/index.js';
export * from './vm-network.js';
