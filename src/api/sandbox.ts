/**
 * Sandbox (agents.x-k8s.io; docs/api.md). v1beta1 is the hub/storage version.
 */
import { Type, type Static } from '@sinclair/typebox';
import {
  ConditionsSchema,
  ObjectMetaSchema,
  PodTemplateSchema,
  ShutdownPolicySchema,
  VolumeClaimTemplatesSchema,
} from './common.js';
import { Bool, DateTime, Int32, Str, StringEnum } from './internal/schema-dsl.js';

export const VOLUME_CLAIM_TEMPLATES_IMMUTABLE_RULE =
  'has(self.volumeClaimTemplates) == has(oldSelf.volumeClaimTemplates) && (!has(self.volumeClaimTemplates) || self.volumeClaimTemplates == oldSelf.volumeClaimTemplates)';
export const VOLUME_CLAIM_TEMPLATES_IMMUTABLE_MESSAGE = 'volumeClaimTemplates is immutable';

const service = () =>
  Bool({
    description:
      'Tri-state: unset creates no Service, true keeps a headless Service named like the Sandbox, false deletes an owned one.',
  });
const shutdownTime = () => DateTime({ description: 'Absolute expiry time; the Sandbox is torn down when reached.' });

export const OperatingModeSchema = StringEnum(['Running', 'Suspended'] as const, { default: 'Running' });
export type OperatingMode = Static<typeof OperatingModeSchema>;

export const SandboxSpecV1beta1Schema = Type.Object(
  {
    podTemplate: PodTemplateSchema,
    volumeClaimTemplates: Type.Optional(VolumeClaimTemplatesSchema),
    service: Type.Optional(service()),
    shutdownTime: Type.Optional(shutdownTime()),
    shutdownPolicy: Type.Optional(ShutdownPolicySchema),
    operatingMode: Type.Optional(OperatingModeSchema),
  },
  {
    'x-kubernetes-validations': [
      { rule: VOLUME_CLAIM_TEMPLATES_IMMUTABLE_RULE, message: VOLUME_CLAIM_TEMPLATES_IMMUTABLE_MESSAGE },
    ],
  },
);
export type SandboxSpec = Static<typeof SandboxSpecV1beta1Schema>;

export const SandboxStatusV1beta1Schema = Type.Object({
  serviceFQDN: Type.Optional(Str()),
  service: Type.Optional(Str()),
  conditions: Type.Optional(ConditionsSchema),
  selector: Type.Optional(
    Str({ description: 'Label selector of the Sandbox pod (`agents.x-k8s.io/sandbox-name-hash=<hash>`).' }),
  ),
  podIPs: Type.Optional(Type.Array(Str())),
  nodeName: Type.Optional(Str()),
});
export type SandboxStatus = Static<typeof SandboxStatusV1beta1Schema>;

export const SandboxV1beta1Schema = Type.Object({
  apiVersion: Type.Optional(Str()),
  kind: Type.Optional(Str()),
  metadata: Type.Optional(ObjectMetaSchema),
  spec: SandboxSpecV1beta1Schema,
  status: Type.Optional(SandboxStatusV1beta1Schema),
});
/** The hub (storage) version. */
export type Sandbox = Static<typeof SandboxV1beta1Schema>;

export const SandboxSpecV1alpha1Schema = Type.Object({
  podTemplate: PodTemplateSchema,
  volumeClaimTemplates: Type.Optional(VolumeClaimTemplatesSchema),
  shutdownTime: Type.Optional(shutdownTime()),
  shutdownPolicy: Type.Optional(ShutdownPolicySchema),
  replicas: Type.Optional(Int32({ minimum: 0, maximum: 1, default: 1, description: '0 suspends, 1 runs.' })),
  service: Type.Optional(service()),
});
export type SandboxSpecV1alpha1 = Static<typeof SandboxSpecV1alpha1Schema>;

export const SandboxStatusV1alpha1Schema = Type.Object({
  serviceFQDN: Type.Optional(Str()),
  service: Type.Optional(Str()),
  conditions: Type.Optional(ConditionsSchema),
  replicas: Type.Optional(Int32({ minimum: 0 })),
  selector: Type.Optional(Str()),
  podIPs: Type.Optional(Type.Array(Str())),
});
export type SandboxStatusV1alpha1 = Static<typeof SandboxStatusV1alpha1Schema>;

export const SandboxV1alpha1Schema = Type.Object({
  apiVersion: Type.Optional(Str()),
  kind: Type.Optional(Str()),
  metadata: Type.Optional(ObjectMetaSchema),
  spec: SandboxSpecV1alpha1Schema,
  status: Type.Optional(SandboxStatusV1alpha1Schema),
});
export type SandboxV1alpha1 = Static<typeof SandboxV1alpha1Schema>;
