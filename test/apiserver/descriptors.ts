/**
 * A sandboxes descriptor for the discovery and OpenAPI tests: the real Sandbox schema (src/api) and two made-up
 * action subresources, one answering with the Sandbox itself and one with a kind of its own.
 */
import { Type } from '@sinclair/typebox';
import { AGENTS_GROUP, HUB_VERSION, SandboxV1beta1Schema } from '../../src/api/index.js';
import type { ResourceDescriptor } from '../../src/apiserver/types.js';

const typeMeta = { apiVersion: Type.Optional(Type.String()), kind: Type.Optional(Type.String()) };

export const PauseRequestSchema = Type.Object({
  ...typeMeta,
  reason: Type.Optional(Type.String({ description: 'Why the sandbox is paused.' })),
});

export const ForkRequestSchema = Type.Object({
  ...typeMeta,
  metadata: Type.Optional(Type.Unsafe({ type: 'object' })),
  count: Type.Optional(Type.Integer({ format: 'int32', minimum: 1 })),
});

export const ForkResultSchema = Type.Object({
  ...typeMeta,
  metadata: Type.Optional(Type.Unsafe({ type: 'object' })),
  names: Type.Array(Type.String()),
});

export function sandboxesDescriptor(): ResourceDescriptor {
  return {
    group: AGENTS_GROUP,
    version: HUB_VERSION,
    kind: 'Sandbox',
    listKind: 'SandboxList',
    plural: 'sandboxes',
    singular: 'sandbox',
    namespaced: true,
    shortNames: ['sbx'],
    categories: ['all'],
    verbs: ['get', 'list', 'watch', 'create', 'delete'],
    schema: SandboxV1beta1Schema,
    description: 'A Sandbox is one agent sandbox backed by a microVM.',
    subresources: [
      {
        name: 'pause',
        requestKind: 'SandboxPauseRequest',
        requestSchema: PauseRequestSchema,
        responseKind: 'Sandbox',
        responseSchema: SandboxV1beta1Schema,
        description: 'pause a Sandbox',
      },
      {
        name: 'fork',
        requestKind: 'SandboxForkRequest',
        requestSchema: ForkRequestSchema,
        responseKind: 'SandboxForkResult',
        responseSchema: ForkResultSchema,
        description: 'fork a Sandbox',
      },
    ],
  };
}
