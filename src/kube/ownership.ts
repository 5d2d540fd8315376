import { apiVersionOf, type KubeObject, type OwnerReference, type ResourceType } from './resource.js';

/** Small named verbs on ownerReferences (controller-runtime's controllerutil). */

export function controllerRef(owner: KubeObject, rt: ResourceType): OwnerReference {
  return {
    apiVersion: apiVersionOf(rt),
    kind: rt.kind,
    name: owner.metadata.name ?? '',
    uid: owner.metadata.uid ?? '',
    controller: true,
    blockOwnerDeletion: true,
  };
}

export function controllerOf(obj: KubeObject): OwnerReference | undefined {
  return obj.metadata.ownerReferences?.find((r) => r.controller === true);
}

export function isControlledBy(obj: KubeObject, owner: KubeObject): boolean {
  const ref = controllerOf(obj);
  return !!ref && !!owner.metadata.uid && ref.uid === owner.metadata.uid;
}

/** Group of an ownerReference's apiVersion ('' for core). */
export function refGroup(ref: Pick<OwnerReference, 'apiVersion'>): string {
  const i = ref.apiVersion.indexOf('/');
  return i < 0 ? '' : ref.apiVersion.slice(0, i);
}
