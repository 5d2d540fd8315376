/**
 * Response negotiation by the Accept header, as k8s.io/apiserver does it (pkg/endpoints/handlers/negotiation and
 * response.go): kubectl get asks for `as=Table`, the metadata client (garbage collector, quota, namespace
 * controller) for `as=PartialObjectMetadata[List]`, everyone else for plain JSON. Protobuf is never offered: a
 * client that also accepts JSON gets JSON (it decodes by the response Content-Type), one that accepts only
 * protobuf gets 406.
 */
import { acceptedRanges, coversJson, type MediaRange } from './served-document.js';
import { notAcceptable } from './status.js';

export type Shape =
  { kind: 'object' } | { kind: 'table'; version: 'v1' | 'v1beta1' } | { kind: 'partial'; version: 'v1' | 'v1beta1' };

/** What the response holds: one object (get, create, delete, and every watch event), or a list. */
export type Target = 'object' | 'list' | 'watch';

function shapeOf(m: MediaRange, target: Target): Shape | undefined {
  if (!coversJson(m)) return undefined;
  const as = m.params.as;
  if (!as) return { kind: 'object' };
  if (m.params.g !== 'meta.k8s.io') return undefined;
  const version = m.params.v === 'v1' || m.params.v === 'v1beta1' ? m.params.v : undefined;
  if (!version) return undefined;
  if (as === 'Table') return { kind: 'table', version };
  if (as === 'PartialObjectMetadata' && target !== 'list') return { kind: 'partial', version };
  if (as === 'PartialObjectMetadataList' && target === 'list') return { kind: 'partial', version };
  return undefined;
}

export const OFFERED = [
  'application/json',
  'application/json;as=Table;v=v1;g=meta.k8s.io',
  'application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io',
];

/** The first acceptable shape in the client's order of preference (q-values first), or 406. */
export function negotiate(accept: string | undefined, target: Target): Shape {
  if (!accept || !accept.trim()) return { kind: 'object' };
  for (const m of acceptedRanges(accept)) {
    const shape = shapeOf(m, target);
    if (shape) return shape;
  }
  throw notAcceptable(accept, OFFERED);
}

/** `includeObject` of a Table request (None | Metadata | Object; default Metadata). */
export function includeObjectPolicy(value: string | null): 'None' | 'Metadata' | 'Object' {
  return value === 'None' || value === 'Object' ? value : 'Metadata';
}
