/**
 * sandboxd's rows (`GET /v1/sandboxes`, the change feed) as sandbox-apiserver's store takes them, for the tests that
 * drive the store, the verbs or the e2b operations over stand-in nodes.
 */
import type { NodeRow, StoredObject } from '../../src/apiserver/sandboxes/entry.js';

/** A Sandbox object as a node stores it with its claim. */
export function sandboxObject(namespace: string, name: string, image = 'sandbox/base'): StoredObject {
  return {
    metadata: { name, namespace, uid: `uid-${name}`, creationTimestamp: '2026-12-01T00:00:00Z' },
    spec: { podTemplate: { spec: { containers: [{ name: 'sandbox', image }] } } },
  } as StoredObject;
}

/** Claim `id` of `object`, running, with a lease far ahead; `extra` overrides any field. */
export function nodeRow(id: string, object: StoredObject, extra: Partial<NodeRow> = {}): NodeRow {
  return {
    id,
    key: { template: 'sandbox/base', net: 'none', size: 'small' },
    deadline: '2030-01-01T00:00:00.000Z',
    claimed_at: '2026-12-01T00:00:00.000Z',
    hibernated: false,
    rv: 1,
    object,
    ...extra,
  };
}
