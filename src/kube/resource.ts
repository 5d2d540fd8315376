import type { ObjectMeta, OwnerReference } from '../api/meta.js';

export type { ObjectMeta, OwnerReference };

/**
 * A resource the client can address. Built once per kind (the api scheme and core kinds below), so paths and
 * GVKs are never typed by hand in controllers.
 */
export interface ResourceType {
  group: string;
  version: string;
  kind: string;
  plural: string;
  namespaced: boolean;
}

export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata: ObjectMeta;
}

export function apiVersionOf(rt: Pick<ResourceType, 'group' | 'version'>): string {
  return rt.group ? `${rt.group}/${rt.version}` : rt.version;
}

export function collectionPath(rt: ResourceType, namespace?: string): string {
  const base = rt.group ? `/apis/${rt.group}/${rt.version}` : `/api/${rt.version}`;
  return rt.namespaced && namespace
    ? `${base}/namespaces/${encodeURIComponent(namespace)}/${rt.plural}`
    : `${base}/${rt.plural}`;
}

export function objectPath(
  rt: ResourceType,
  namespace: string | undefined,
  name: string,
  subresource?: string,
): string {
  return `${collectionPath(rt, namespace)}/${encodeURIComponent(name)}${subresource ? `/${subresource}` : ''}`;
}

/** `<namespace>/<name>` (or `<name>` for cluster-scoped), the key of caches and queues. */
export function keyOf(obj: { metadata: ObjectMeta }): string {
  const { namespace, name } = obj.metadata;
  return namespace ? `${namespace}/${name}` : (name ?? '');
}

export function splitKey(key: string): { namespace: string | undefined; name: string } {
  const i = key.indexOf('/');
  return i < 0 ? { namespace: undefined, name: key } : { namespace: key.slice(0, i), name: key.slice(i + 1) };
}

const core = (kind: string, plural: string, namespaced = true): ResourceType => ({
  group: '',
  version: 'v1',
  kind,
  plural,
  namespaced,
});

export const Pods = core('Pod', 'pods');
export const Services = core('Service', 'services');
export const PersistentVolumeClaims = core('PersistentVolumeClaim', 'persistentvolumeclaims');
export const ConfigMaps = core('ConfigMap', 'configmaps');
export const Secrets = core('Secret', 'secrets');
export const Namespaces = core('Namespace', 'namespaces', false);
export const Nodes = core('Node', 'nodes', false);
export const Events = core('Event', 'events');
export const Leases: ResourceType = {
  group: 'coordination.k8s.io',
  version: 'v1',
  kind: 'Lease',
  plural: 'leases',
  namespaced: true,
};
export const NetworkPolicies: ResourceType = {
  group: 'networking.k8s.io',
  version: 'v1',
  kind: 'NetworkPolicy',
  plural: 'networkpolicies',
  namespaced: true,
};
export const EventsV1: ResourceType = {
  group: 'events.k8s.io',
  version: 'v1',
  kind: 'Event',
  plural: 'events',
  namespaced: true,
};
export const CustomResourceDefinitions: ResourceType = {
  group: 'apiextensions.k8s.io',
  version: 'v1',
  kind: 'CustomResourceDefinition',
  plural: 'customresourcedefinitions',
  namespaced: false,
};
export const APIServices: ResourceType = {
  group: 'apiregistration.k8s.io',
  version: 'v1',
  kind: 'APIService',
  plural: 'apiservices',
  namespaced: false,
};
export const TokenReviews: ResourceType = {
  group: 'authentication.k8s.io',
  version: 'v1',
  kind: 'TokenReview',
  plural: 'tokenreviews',
  namespaced: false,
};
export const SubjectAccessReviews: ResourceType = {
  group: 'authorization.k8s.io',
  version: 'v1',
  kind: 'SubjectAccessReview',
  plural: 'subjectaccessreviews',
  namespaced: false,
};
