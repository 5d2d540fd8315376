/**
 * The request and response kinds of the Sandbox lifecycle verbs (agents.x-k8s.io/v1beta1, served by
 * sandbox-apiserver as POST-only subresources: docs/aggregated-layout.md "Lifecycle verbs"). One source for the
 * server's validation, its OpenAPI and the kubectl plugin.
 */
import { Type, type Static } from '@sinclair/typebox';
import { ObjectMetaSchema } from './common.js';
import { DateTime, Int32, Str, StringEnum } from './internal/schema-dsl.js';

const typeMeta = { apiVersion: Type.Optional(Str()), kind: Type.Optional(Str()) };

export const SandboxPauseOptionsSchema = Type.Object({
  ...typeMeta,
  mode: Type.Optional(
    StringEnum(['Memory', 'Hibernate'] as const, {
      description:
        'Set in the answer: how the node paused it. Memory: the vCPUs are frozen and RAM is kept (resume in milliseconds). Hibernate: its memory is written to disk and the VM stopped (frees RAM; resume takes longer).',
    }),
  ),
});
export type SandboxPauseOptions = Static<typeof SandboxPauseOptionsSchema>;

export const SandboxResumeOptionsSchema = Type.Object({ ...typeMeta });
export type SandboxResumeOptions = Static<typeof SandboxResumeOptionsSchema>;

/** The most children one fork makes: every API that forks (sandboxd, sandbox-apiserver, e2b) bounds count by it. */
export const MAX_FORK_COUNT = 16;

export const SandboxForkOptionsSchema = Type.Object({
  ...typeMeta,
  count: Type.Optional(
    Int32({
      minimum: 1,
      maximum: MAX_FORK_COUNT,
      description: `Children to make (default 1, at most ${MAX_FORK_COUNT}).`,
    }),
  ),
  ttlSeconds: Type.Optional(
    Int32({ minimum: 0, description: "Each child's lease (0: the node's default; never the parent's remainder)." }),
  ),
});
export type SandboxForkOptions = Static<typeof SandboxForkOptionsSchema>;

export const SandboxForkChildSchema = Type.Object({
  name: Str({ description: 'The child Sandbox, in the parent’s namespace.' }),
  namespace: Str(),
  sandboxID: Str({ description: 'Its node-local claim id.' }),
  nodeName: Str(),
  address: Type.Optional(Str()),
  token: Type.Optional(Str({ description: "The child's sandbox token (only in this answer; never on reads)." })),
  deadline: Type.Optional(DateTime()),
});

export const SandboxForkResultSchema = Type.Object({
  ...typeMeta,
  children: Type.Array(SandboxForkChildSchema, { description: 'In the order they were made.' }),
});
export type SandboxForkResult = Static<typeof SandboxForkResultSchema>;

export const SandboxSnapshotOptionsSchema = Type.Object({
  ...typeMeta,
  name: Type.Optional(Str({ description: 'A label for the snapshot.' })),
});
export type SandboxSnapshotOptions = Static<typeof SandboxSnapshotOptionsSchema>;

export const SandboxSnapshotResultSchema = Type.Object({
  ...typeMeta,
  snapshotID: Str({
    description: 'Name it in the annotation sandbox.cocoonstack.io/snapshot of a new Sandbox to start from it.',
  }),
  name: Type.Optional(Str()),
  nodeName: Str({ description: 'The node that holds it.' }),
  creationTimestamp: Type.Optional(DateTime()),
});
export type SandboxSnapshotResult = Static<typeof SandboxSnapshotResultSchema>;

/**
 * Where a snapshot's copies are, as the node that holds it last counted them (its replicator, docs/placement.md
 * "Replicas"). Absent until a holder has counted (and on nodes with --checkpoint-replicas 1, which do not count).
 */
export const SnapshotCopiesSchema = Type.Object(
  {
    count: Int32({ description: 'How many nodes held it at the count, the counting node included.' }),
    want: Int32({ description: 'How many should: --checkpoint-replicas, or the fleet size when that is smaller.' }),
    nodes: Type.Array(Str(), {
      description: 'The nodes that held it, by node name (an address no NodeInventory names stays an address).',
    }),
    checkedAt: DateTime({ description: 'When the count was made.' }),
  },
  {
    description:
      'Its replicas as last counted by a node that holds it (docs/placement.md "Where copies show"); absent until one has counted.',
  },
);
export type SnapshotCopies = Static<typeof SnapshotCopiesSchema>;

/**
 * A snapshot as the resource `sandboxsnapshots` serves it (get, list, delete; read from the nodes, no etcd object):
 * named by its snapshotID, in the namespace of the sandbox it was taken of.
 */
export const SandboxSnapshotV1beta1Schema = Type.Object({
  ...typeMeta,
  metadata: Type.Optional(ObjectMetaSchema),
  snapshotName: Type.Optional(Str({ description: 'The name given when it was taken (SandboxSnapshotOptions.name).' })),
  sandboxName: Type.Optional(Str({ description: 'The Sandbox it was taken of (it may be gone since).' })),
  nodeNames: Type.Array(Str(), { description: 'The nodes that hold a copy; a new Sandbox from it starts on one.' }),
  copies: Type.Optional(SnapshotCopiesSchema),
  template: Str({ description: 'The guest template of the sandbox it was taken of.' }),
  net: Str({ description: 'Its network lane.' }),
  size: Str({ description: 'Its size.' }),
});
export type SandboxSnapshot = Static<typeof SandboxSnapshotV1beta1Schema>;

/**
 * The longest one exec may run: a day. Without a bound, the caller's deadline (the timeout plus a margin, in ms)
 * passes Node's 2^31-1 ms timer limit near 24.8 days, and Node then fires it at once: the request failed with a 503
 * "retry" while the node ran the command, and a retry ran it again.
 */
export const MAX_EXEC_TIMEOUT_SECONDS = 86_400;

export const SandboxExecOptionsSchema = Type.Object({
  ...typeMeta,
  command: Type.Array(Str(), { minItems: 1, description: 'argv of the command to run in the sandbox.' }),
  workingDir: Type.Optional(Str()),
  env: Type.Optional(Type.Unsafe<Record<string, string>>({ type: 'object', additionalProperties: { type: 'string' } })),
  timeoutSeconds: Type.Optional(
    Int32({
      minimum: 1,
      maximum: MAX_EXEC_TIMEOUT_SECONDS,
      description: `Seconds the command may run (default 60, at most ${MAX_EXEC_TIMEOUT_SECONDS}).`,
    }),
  ),
});
export type SandboxExecOptions = Static<typeof SandboxExecOptionsSchema>;

export const SandboxExecResultSchema = Type.Object({
  ...typeMeta,
  exitCode: Int32(),
  stdout: Str(),
  stderr: Str(),
});
export type SandboxExecResult = Static<typeof SandboxExecResultSchema>;
