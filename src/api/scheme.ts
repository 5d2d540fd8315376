/**
 * The one registry of the agent-sandbox API: group, kind, plural, versions, schemas, printer columns,
 * subresources and conversion of every CRD. GVKs and plurals are read from here, never typed elsewhere; crd.ts
 * renders the CustomResourceDefinitions from it.
 */
import type { TSchema } from '@sinclair/typebox';
import { NodeInventoryV1beta1Schema } from './node-inventory.js';
import { SandboxV1alpha1Schema, SandboxV1beta1Schema } from './sandbox.js';
import { SandboxClaimV1alpha1Schema, SandboxClaimV1beta1Schema } from './sandbox-claim.js';
import { SandboxTemplateV1alpha1Schema, SandboxTemplateV1beta1Schema } from './sandbox-template.js';
import { SandboxWarmPoolV1alpha1Schema, SandboxWarmPoolV1beta1Schema } from './sandbox-warm-pool.js';

export const AGENTS_GROUP = 'agents.x-k8s.io';
export const EXTENSIONS_GROUP = 'extensions.agents.x-k8s.io';
export const HUB_VERSION = 'v1beta1';
export const SPOKE_VERSION = 'v1alpha1';

export type ApiVersionName = typeof HUB_VERSION | typeof SPOKE_VERSION;

export interface GroupVersionKind {
  readonly group: string;
  readonly version: string;
  readonly kind: string;
}

export interface GroupVersionResource {
  readonly group: string;
  readonly version: string;
  readonly resource: string;
}

export interface PrinterColumn {
  readonly name: string;
  readonly type: 'string' | 'integer' | 'number' | 'boolean' | 'date';
  readonly jsonPath: string;
  readonly description?: string;
  readonly priority?: number;
  readonly format?: string;
}

export interface ScaleSubresource {
  readonly specReplicasPath: string;
  readonly statusReplicasPath: string;
  readonly labelSelectorPath?: string;
}

export interface VersionDef {
  readonly name: ApiVersionName;
  readonly schema: TSchema;
  readonly served: boolean;
  readonly storage: boolean;
  readonly deprecated: boolean;
  readonly printerColumns: readonly PrinterColumn[];
  readonly subresources: { readonly status?: true; readonly scale?: ScaleSubresource };
}

export interface ResourceDef {
  readonly group: string;
  readonly kind: string;
  readonly listKind: string;
  readonly plural: string;
  readonly singular: string;
  readonly shortNames: readonly string[];
  readonly scope: 'Namespaced' | 'Cluster';
  readonly versions: readonly VersionDef[];
  /** `Webhook` for every kind that has a v1alpha1. */
  readonly conversion: 'Webhook' | 'None';
}

const readyColumn: PrinterColumn = {
  name: 'Ready',
  type: 'string',
  jsonPath: ".status.conditions[?(@.type=='Ready')].status",
};
const reasonColumn: PrinterColumn = {
  name: 'Reason',
  type: 'string',
  jsonPath: ".status.conditions[?(@.type=='Ready')].reason",
};
const ageColumn: PrinterColumn = { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' };
const replicasScale: ScaleSubresource = {
  specReplicasPath: '.spec.replicas',
  statusReplicasPath: '.status.replicas',
  labelSelectorPath: '.status.selector',
};

function version(
  name: ApiVersionName,
  schema: TSchema,
  printerColumns: readonly PrinterColumn[],
  subresources: VersionDef['subresources'],
): VersionDef {
  const hub = name === HUB_VERSION;
  return { name, schema, served: true, storage: hub, deprecated: !hub, printerColumns, subresources };
}

export const SandboxResource: ResourceDef = {
  group: AGENTS_GROUP,
  kind: 'Sandbox',
  listKind: 'SandboxList',
  plural: 'sandboxes',
  singular: 'sandbox',
  shortNames: ['sandbox'],
  scope: 'Namespaced',
  conversion: 'Webhook',
  versions: [
    version(HUB_VERSION, SandboxV1beta1Schema, [readyColumn, reasonColumn, ageColumn], { status: true }),
    version(SPOKE_VERSION, SandboxV1alpha1Schema, [], { status: true, scale: replicasScale }),
  ],
};

export const SandboxTemplateResource: ResourceDef = {
  group: EXTENSIONS_GROUP,
  kind: 'SandboxTemplate',
  listKind: 'SandboxTemplateList',
  plural: 'sandboxtemplates',
  singular: 'sandboxtemplate',
  shortNames: ['sandboxtemplate'],
  scope: 'Namespaced',
  conversion: 'Webhook',
  versions: [
    version(HUB_VERSION, SandboxTemplateV1beta1Schema, [], {}),
    version(SPOKE_VERSION, SandboxTemplateV1alpha1Schema, [], {}),
  ],
};

const poolColumns: readonly PrinterColumn[] = [
  { name: 'Ready', type: 'integer', jsonPath: '.status.readyReplicas' },
  { name: 'Desired', type: 'integer', jsonPath: '.spec.replicas' },
  ageColumn,
];

export const SandboxWarmPoolResource: ResourceDef = {
  group: EXTENSIONS_GROUP,
  kind: 'SandboxWarmPool',
  listKind: 'SandboxWarmPoolList',
  plural: 'sandboxwarmpools',
  singular: 'sandboxwarmpool',
  shortNames: ['swp'],
  scope: 'Namespaced',
  conversion: 'Webhook',
  versions: [
    version(HUB_VERSION, SandboxWarmPoolV1beta1Schema, poolColumns, { status: true, scale: replicasScale }),
    version(SPOKE_VERSION, SandboxWarmPoolV1alpha1Schema, poolColumns, { status: true, scale: replicasScale }),
  ],
};

export const SandboxClaimResource: ResourceDef = {
  group: EXTENSIONS_GROUP,
  kind: 'SandboxClaim',
  listKind: 'SandboxClaimList',
  plural: 'sandboxclaims',
  singular: 'sandboxclaim',
  shortNames: ['sandboxclaim'],
  scope: 'Namespaced',
  conversion: 'Webhook',
  versions: [
    version(
      HUB_VERSION,
      SandboxClaimV1beta1Schema,
      [readyColumn, { name: 'Sandbox', type: 'string', jsonPath: '.status.sandbox.name' }, reasonColumn, ageColumn],
      { status: true },
    ),
    version(SPOKE_VERSION, SandboxClaimV1alpha1Schema, [], { status: true }),
  ],
};

export const NodeInventoryResource: ResourceDef = {
  group: EXTENSIONS_GROUP,
  kind: 'NodeInventory',
  listKind: 'NodeInventoryList',
  plural: 'nodeinventories',
  singular: 'nodeinventory',
  shortNames: [],
  scope: 'Cluster',
  conversion: 'None',
  versions: [
    version(
      HUB_VERSION,
      NodeInventoryV1beta1Schema,
      [{ name: 'Node', type: 'string', jsonPath: '.node' }, ageColumn],
      {},
    ),
  ],
};

/** Every CRD of the API, in a stable order. */
export const ALL_RESOURCES: readonly ResourceDef[] = [
  SandboxResource,
  SandboxTemplateResource,
  SandboxWarmPoolResource,
  SandboxClaimResource,
  NodeInventoryResource,
];

/** The kinds served through the conversion webhook. */
export const CONVERTIBLE_RESOURCES: readonly ResourceDef[] = ALL_RESOURCES.filter((r) => r.conversion === 'Webhook');

export function apiVersionOf(resource: ResourceDef, version: string = HUB_VERSION): string {
  return `${resource.group}/${version}`;
}

export function gvkOf(resource: ResourceDef, version: string = HUB_VERSION): GroupVersionKind {
  return { group: resource.group, version, kind: resource.kind };
}

export function gvrOf(resource: ResourceDef, version: string = HUB_VERSION): GroupVersionResource {
  return { group: resource.group, version, resource: resource.plural };
}

/** `<plural>.<group>`, the CustomResourceDefinition's name. */
export function crdNameOf(resource: ResourceDef): string {
  return `${resource.plural}.${resource.group}`;
}

/** The v1alpha1 deprecation warning, as the upstream CRDs word it (docs/api.md). */
export function deprecationWarningOf(resource: ResourceDef, version: string): string {
  return `${resource.group}/${version} ${resource.kind} is deprecated; use ${resource.group}/${HUB_VERSION} ${resource.kind} instead`;
}

/** Hub GVKs (what controllers watch), by kind. */
export const GVK = {
  Sandbox: gvkOf(SandboxResource),
  SandboxTemplate: gvkOf(SandboxTemplateResource),
  SandboxWarmPool: gvkOf(SandboxWarmPoolResource),
  SandboxClaim: gvkOf(SandboxClaimResource),
  NodeInventory: gvkOf(NodeInventoryResource),
} as const;

/** Hub apiVersions, by kind (`agents.x-k8s.io/v1beta1`, ...), e.g. for ownerReferences. */
export const API_VERSION = {
  Sandbox: apiVersionOf(SandboxResource),
  SandboxTemplate: apiVersionOf(SandboxTemplateResource),
  SandboxWarmPool: apiVersionOf(SandboxWarmPoolResource),
  SandboxClaim: apiVersionOf(SandboxClaimResource),
  NodeInventory: apiVersionOf(NodeInventoryResource),
} as const;

export function resourceForKind(group: string, kind: string): ResourceDef | undefined {
  return ALL_RESOURCES.find((r) => r.group === group && r.kind === kind);
}

/** Splits `group/version` (or a core `v1`). */
export function parseApiVersion(apiVersion: string): { group: string; version: string } {
  const slash = apiVersion.lastIndexOf('/');
  return slash < 0
    ? { group: '', version: apiVersion }
    : { group: apiVersion.slice(0, slash), version: apiVersion.slice(slash + 1) };
}
