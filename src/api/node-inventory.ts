/**
 * NodeInventory (extensions.agents.x-k8s.io/v1beta1, cluster-scoped; docs/sandboxd-api.md "NodeInventory"). Fields are
 * top level: there is no spec/status. Written by node agents, read by the aggregated apiserver.
 */
import { Type, type Static } from '@sinclair/typebox';
import { ObjectMetaSchema } from './common.js';
import { DateTime, Int, Str } from './internal/schema-dsl.js';

export const InventoryEntrySchema = Type.Object({
  name: Str({ description: '`<namespace>/<name>`; an unqualified name means namespace `default`.' }),
  id: Type.Optional(Str({ description: 'Node-local claim id (`sb_…`).' })),
  phase: Str({ description: 'Node-reported phase, e.g. `Running` or `Hibernated`.' }),
  claimRef: Type.Optional(Str()),
  addr: Type.Optional(Str({ description: 'Sandbox `host:port`.' })),
  deadline: Type.Optional(DateTime()),
});
export type InventoryEntry = Static<typeof InventoryEntrySchema>;

export const PoolCapacitySchema = Type.Object({
  template: Str(),
  net: Type.Optional(Str()),
  size: Type.Optional(Str()),
  warm: Int(),
  target: Int(),
});
export type PoolCapacity = Static<typeof PoolCapacitySchema>;

/**
 * This node's checkpoints in numbers (docs/placement.md "Replicas"): a summary of constant size, not one row per
 * checkpoint (the object is rewritten whole at every publish; where each one's copies are is in
 * sandbox-apiserver's SandboxSnapshot `copies` and the node's `GET /v1/checkpoints`).
 */
export const CheckpointSummarySchema = Type.Object({
  held: Int({ description: "Checkpoints on this node's disk: taken here, or copies of other nodes'." }),
  replicas: Int({ description: 'How many nodes each should be on (--checkpoint-replicas).' }),
  counted: Type.Optional(
    Int({
      description: 'How many of them this node has counted the copies of; absent when it does not count (replicas 1).',
    }),
  ),
  underReplicated: Type.Optional(
    Int({ description: 'Of the counted, how many fewer nodes held than wanted at the last count.' }),
  ),
});
export type CheckpointSummary = Static<typeof CheckpointSummarySchema>;

export const NodeInventoryV1beta1Schema = Type.Object({
  apiVersion: Type.Optional(Str()),
  kind: Type.Optional(Str()),
  metadata: Type.Optional(ObjectMetaSchema),
  node: Str({ description: 'Owning node name; equals metadata.name.' }),
  address: Type.Optional(Str({ description: 'The node sandboxd advertise `host:port`.' })),
  entries: Type.Optional(Type.Array(InventoryEntrySchema)),
  pools: Type.Optional(Type.Array(PoolCapacitySchema)),
  checkpoints: Type.Optional(CheckpointSummarySchema),
});
export type NodeInventory = Static<typeof NodeInventoryV1beta1Schema>;
