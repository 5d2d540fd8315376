/**
 * Types shared by several kinds (docs/api.md): pod templates, PVC templates, conditions, network policy rules.
 */
import { Type, type Static } from '@sinclair/typebox';
import { coreSchema, type CoreTypes } from './core.js';
import { DateTime, Int64, List, Raw, Str, StringEnum, StringMap } from './internal/schema-dsl.js';
import type { ObjectMeta } from './meta.js';

export const ObjectMetaSchema = Raw<ObjectMeta>({ type: 'object' });

export const PodSpecSchema = Raw<CoreTypes['PodSpec']>(coreSchema('PodSpec'));
export const PersistentVolumeClaimSpecSchema = Raw<CoreTypes['PersistentVolumeClaimSpec']>(
  coreSchema('PersistentVolumeClaimSpec'),
);
export const NetworkPolicyIngressRuleSchema = Raw<CoreTypes['NetworkPolicyIngressRule']>(
  coreSchema('NetworkPolicyIngressRule'),
);
export const NetworkPolicyEgressRuleSchema = Raw<CoreTypes['NetworkPolicyEgressRule']>(
  coreSchema('NetworkPolicyEgressRule'),
);

export const PodMetadataSchema = Type.Object(
  {
    labels: Type.Optional(StringMap()),
    annotations: Type.Optional(StringMap()),
  },
  { description: 'Labels and annotations for the pod (only these metadata fields are used).' },
);
export type PodMetadata = Static<typeof PodMetadataSchema>;

export const EmbeddedObjectMetadataSchema = Type.Object({
  name: Type.Optional(Str({ description: 'Name of the PVC template; also the pod volume name.' })),
  labels: Type.Optional(StringMap()),
  annotations: Type.Optional(StringMap()),
});
export type EmbeddedObjectMetadata = Static<typeof EmbeddedObjectMetadataSchema>;

export const PodTemplateSchema = Type.Object({
  metadata: Type.Optional(PodMetadataSchema),
  spec: PodSpecSchema,
});
export type PodTemplate = Static<typeof PodTemplateSchema>;

export const PersistentVolumeClaimTemplateSchema = Type.Object({
  metadata: Type.Optional(EmbeddedObjectMetadataSchema),
  spec: PersistentVolumeClaimSpecSchema,
});
export type PersistentVolumeClaimTemplate = Static<typeof PersistentVolumeClaimTemplateSchema>;

export const VolumeClaimTemplatesSchema = List(PersistentVolumeClaimTemplateSchema, {
  'x-kubernetes-list-type': 'atomic',
  description: 'PersistentVolumeClaims created per Sandbox as `<template name>-<sandbox name>`.',
});

/** metav1.Condition. */
export const ConditionSchema = Type.Object({
  type: Str({
    maxLength: 316,
    pattern:
      '^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$',
  }),
  status: StringEnum(['True', 'False', 'Unknown'] as const),
  observedGeneration: Type.Optional(Int64({ minimum: 0 })),
  lastTransitionTime: DateTime(),
  reason: Str({ minLength: 1, maxLength: 1024, pattern: '^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$' }),
  message: Str({ maxLength: 32768 }),
});
export type Condition = Static<typeof ConditionSchema>;

export const ConditionsSchema = Type.Array(ConditionSchema);

export const ShutdownPolicySchema = StringEnum(['Delete', 'Retain'] as const, { default: 'Retain' });
export type ShutdownPolicy = Static<typeof ShutdownPolicySchema>;

export const NetworkPolicySpecSchema = Type.Object(
  {
    ingress: Type.Optional(Type.Array(NetworkPolicyIngressRuleSchema)),
    egress: Type.Optional(Type.Array(NetworkPolicyEgressRuleSchema)),
  },
  { description: 'Ingress/egress rules of the NetworkPolicy the template manages; unset means the secure default.' },
);
export type NetworkPolicySpec = Static<typeof NetworkPolicySpecSchema>;

/** `{name}` references (sandboxTemplateRef, warmPoolRef). */
export const NameRefSchema = Type.Object({ name: Str() });
export type NameRef = Static<typeof NameRefSchema>;
