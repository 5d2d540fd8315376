import {
  HUB_VERSION,
  NodeInventoryResource,
  SandboxClaimResource,
  SandboxResource,
  SandboxTemplateResource,
  SandboxWarmPoolResource,
  type ResourceDef,
} from '../api/scheme.js';
import type { ResourceType } from './resource.js';

/** The agent-sandbox kinds as client resource types (hub version), derived from the api scheme. */
export function resourceTypeOf(def: ResourceDef, version: string = HUB_VERSION): ResourceType {
  return { group: def.group, version, kind: def.kind, plural: def.plural, namespaced: def.scope === 'Namespaced' };
}

export const Sandboxes = resourceTypeOf(SandboxResource);
export const SandboxTemplates = resourceTypeOf(SandboxTemplateResource);
export const SandboxWarmPools = resourceTypeOf(SandboxWarmPoolResource);
export const SandboxClaims = resourceTypeOf(SandboxClaimResource);
export const NodeInventories = resourceTypeOf(NodeInventoryResource);
