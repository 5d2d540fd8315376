/**
 * SandboxTemplate (extensions.agents.x-k8s.io; docs/api.md). No status, no subresources.
 */
import { Type, type Static } from '@sinclair/typebox';
import { NetworkPolicySpecSchema, ObjectMetaSchema, PodTemplateSchema, VolumeClaimTemplatesSchema } from './common.js';
import { Bool, Str, StringEnum } from './internal/schema-dsl.js';

export const NetworkPolicyManagementSchema = StringEnum(['Managed', 'Unmanaged'] as const, { default: 'Managed' });
export type NetworkPolicyManagement = Static<typeof NetworkPolicyManagementSchema>;

export const EnvVarsInjectionPolicySchema = StringEnum(['Allowed', 'Overrides', 'Disallowed'] as const, {
  default: 'Disallowed',
});
export type EnvVarsInjectionPolicy = Static<typeof EnvVarsInjectionPolicySchema>;

export const VOLUME_CLAIM_TEMPLATES_POLICIES = ['Disallowed', 'Allowed', 'Overrides'] as const;
export const VolumeClaimTemplatesPolicySchema = StringEnum(VOLUME_CLAIM_TEMPLATES_POLICIES, { default: 'Disallowed' });
export type VolumeClaimTemplatesPolicy = Static<typeof VolumeClaimTemplatesPolicySchema>;

const common = {
  podTemplate: PodTemplateSchema,
  volumeClaimTemplates: Type.Optional(VolumeClaimTemplatesSchema),
  service: Type.Optional(Bool()),
  networkPolicy: Type.Optional(NetworkPolicySpecSchema),
  networkPolicyManagement: Type.Optional(NetworkPolicyManagementSchema),
  envVarsInjectionPolicy: Type.Optional(EnvVarsInjectionPolicySchema),
};

export const SandboxTemplateSpecV1beta1Schema = Type.Object({
  ...common,
  volumeClaimTemplatesPolicy: Type.Optional(VolumeClaimTemplatesPolicySchema),
});
export type SandboxTemplateSpec = Static<typeof SandboxTemplateSpecV1beta1Schema>;

export const SandboxTemplateV1beta1Schema = Type.Object({
  apiVersion: Type.Optional(Str()),
  kind: Type.Optional(Str()),
  metadata: Type.Optional(ObjectMetaSchema),
  spec: SandboxTemplateSpecV1beta1Schema,
});
export type SandboxTemplate = Static<typeof SandboxTemplateV1beta1Schema>;

export const SandboxTemplateSpecV1alpha1Schema = Type.Object(common);
export type SandboxTemplateSpecV1alpha1 = Static<typeof SandboxTemplateSpecV1alpha1Schema>;

export const SandboxTemplateV1alpha1Schema = Type.Object({
  apiVersion: Type.Optional(Str()),
  kind: Type.Optional(Str()),
  metadata: Type.Optional(ObjectMetaSchema),
  spec: SandboxTemplateSpecV1alpha1Schema,
});
export type SandboxTemplateV1alpha1 = Static<typeof SandboxTemplateV1alpha1Schema>;
