/**
 * SandboxClaim (extensions.agents.x-k8s.io; docs/api.md, docs/claim-model.md).
 */
import { Type, type Static } from '@sinclair/typebox';
import {
  ConditionsSchema,
  NameRefSchema,
  ObjectMetaSchema,
  PodMetadataSchema,
  VolumeClaimTemplatesSchema,
} from './common.js';
import { DateTime, Int32, List, Str, StringEnum } from './internal/schema-dsl.js';

export const ClaimShutdownPolicySchema = StringEnum(['Delete', 'DeleteForeground', 'Retain'] as const, {
  default: 'Retain',
});
export type ClaimShutdownPolicy = Static<typeof ClaimShutdownPolicySchema>;

export const LifecycleSchema = Type.Object({
  shutdownTime: Type.Optional(DateTime()),
  ttlSecondsAfterFinished: Type.Optional(Int32({ minimum: 0 })),
  shutdownPolicy: Type.Optional(ClaimShutdownPolicySchema),
});
export type Lifecycle = Static<typeof LifecycleSchema>;

export const EnvVarSchema = Type.Object({
  name: Str(),
  value: Str(),
  containerName: Type.Optional(Str({ description: 'Target container; defaults to containers[0].' })),
});
export type EnvVar = Static<typeof EnvVarSchema>;

export const EnvListSchema = List(EnvVarSchema, { 'x-kubernetes-list-type': 'atomic' });

export const ClaimSandboxStatusSchema = Type.Object({
  name: Type.Optional(Str()),
  podIPs: Type.Optional(Type.Array(Str())),
  serviceFQDN: Type.Optional(
    Str({
      description:
        "The bound Sandbox's status.serviceFQDN (its headless Service, set when spec.service is true); absent without one.",
    }),
  ),
});
export type ClaimSandboxStatus = Static<typeof ClaimSandboxStatusSchema>;

export const SandboxClaimStatusSchema = Type.Object({
  conditions: Type.Optional(ConditionsSchema),
  sandbox: Type.Optional(ClaimSandboxStatusSchema),
});
export type SandboxClaimStatus = Static<typeof SandboxClaimStatusSchema>;

export const SandboxClaimSpecV1beta1Schema = Type.Object({
  warmPoolRef: NameRefSchema,
  lifecycle: Type.Optional(LifecycleSchema),
  additionalPodMetadata: Type.Optional(PodMetadataSchema),
  env: Type.Optional(EnvListSchema),
  volumeClaimTemplates: Type.Optional(VolumeClaimTemplatesSchema),
});
export type SandboxClaimSpec = Static<typeof SandboxClaimSpecV1beta1Schema>;

export const SandboxClaimV1beta1Schema = Type.Object({
  apiVersion: Type.Optional(Str()),
  kind: Type.Optional(Str()),
  metadata: Type.Optional(ObjectMetaSchema),
  spec: SandboxClaimSpecV1beta1Schema,
  status: Type.Optional(SandboxClaimStatusSchema),
});
export type SandboxClaim = Static<typeof SandboxClaimV1beta1Schema>;

export const SandboxClaimSpecV1alpha1Schema = Type.Object({
  sandboxTemplateRef: NameRefSchema,
  warmpool: Type.Optional(
    Str({ default: 'default', description: '`none`, `default`, or the name of a SandboxWarmPool.' }),
  ),
  lifecycle: Type.Optional(LifecycleSchema),
  additionalPodMetadata: Type.Optional(PodMetadataSchema),
  env: Type.Optional(EnvListSchema),
});
export type SandboxClaimSpecV1alpha1 = Static<typeof SandboxClaimSpecV1alpha1Schema>;

export const SandboxClaimV1alpha1Schema = Type.Object({
  apiVersion: Type.Optional(Str()),
  kind: Type.Optional(Str()),
  metadata: Type.Optional(ObjectMetaSchema),
  spec: SandboxClaimSpecV1alpha1Schema,
  status: Type.Optional(SandboxClaimStatusSchema),
});
export type SandboxClaimV1alpha1 = Static<typeof SandboxClaimV1alpha1Schema>;
