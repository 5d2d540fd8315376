/**
 * SandboxWarmPool (extensions.agents.x-k8s.io; docs/api.md). Both versions have status + scale subresources.
 */
import { Type, type Static } from '@sinclair/typebox';
import { NameRefSchema, ObjectMetaSchema } from './common.js';
import { Int32, Int64, Str, StringEnum } from './internal/schema-dsl.js';

export const UpdateStrategyTypeSchema = StringEnum(['Recreate', 'OnReplenish'] as const, { default: 'OnReplenish' });
export type UpdateStrategyType = Static<typeof UpdateStrategyTypeSchema>;

export const UpdateStrategySchema = Type.Object({ type: Type.Optional(UpdateStrategyTypeSchema) });
export type UpdateStrategy = Static<typeof UpdateStrategySchema>;

export const SandboxWarmPoolSpecV1beta1Schema = Type.Object({
  replicas: Type.Optional(Int32({ minimum: 0, default: 1, description: 'Desired number of warm Sandboxes.' })),
  sandboxTemplateRef: NameRefSchema,
  updateStrategy: Type.Optional(UpdateStrategySchema),
});
export type SandboxWarmPoolSpec = Static<typeof SandboxWarmPoolSpecV1beta1Schema>;

export const SandboxWarmPoolStatusV1beta1Schema = Type.Object({
  replicas: Type.Optional(Int32()),
  readyReplicas: Type.Optional(Int32()),
  selector: Type.Optional(Str()),
  observedGeneration: Type.Optional(Int64({ minimum: 0 })),
});
export type SandboxWarmPoolStatus = Static<typeof SandboxWarmPoolStatusV1beta1Schema>;

export const SandboxWarmPoolV1beta1Schema = Type.Object({
  apiVersion: Type.Optional(Str()),
  kind: Type.Optional(Str()),
  metadata: Type.Optional(ObjectMetaSchema),
  spec: SandboxWarmPoolSpecV1beta1Schema,
  status: Type.Optional(SandboxWarmPoolStatusV1beta1Schema),
});
export type SandboxWarmPool = Static<typeof SandboxWarmPoolV1beta1Schema>;

export const SandboxWarmPoolSpecV1alpha1Schema = Type.Object({
  replicas: Int32({ minimum: 0 }),
  sandboxTemplateRef: NameRefSchema,
  updateStrategy: Type.Optional(UpdateStrategySchema),
});
export type SandboxWarmPoolSpecV1alpha1 = Static<typeof SandboxWarmPoolSpecV1alpha1Schema>;

export const SandboxWarmPoolStatusV1alpha1Schema = Type.Object({
  replicas: Type.Optional(Int32()),
  readyReplicas: Type.Optional(Int32()),
  selector: Type.Optional(Str()),
});
export type SandboxWarmPoolStatusV1alpha1 = Static<typeof SandboxWarmPoolStatusV1alpha1Schema>;

export const SandboxWarmPoolV1alpha1Schema = Type.Object({
  apiVersion: Type.Optional(Str()),
  kind: Type.Optional(Str()),
  metadata: Type.Optional(ObjectMetaSchema),
  spec: SandboxWarmPoolSpecV1alpha1Schema,
  status: Type.Optional(SandboxWarmPoolStatusV1alpha1Schema),
});
export type SandboxWarmPoolV1alpha1 = Static<typeof SandboxWarmPoolV1alpha1Schema>;
