/**
 * Object metadata as the agent-sandbox kinds carry it. The CRD schema of `metadata` is just `type: object`
 * (the apiserver owns its validation); the TS type names the fields the operator reads and writes.
 */
export interface OwnerReference {
  apiVersion: string;
  kind: string;
  name: string;
  uid: string;
  controller?: boolean;
  blockOwnerDeletion?: boolean;
}

export interface ObjectMeta {
  name?: string;
  generateName?: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  generation?: number;
  creationTimestamp?: string;
  deletionTimestamp?: string;
  deletionGracePeriodSeconds?: number;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  ownerReferences?: OwnerReference[];
  finalizers?: string[];
  managedFields?: unknown[];
  selfLink?: string;
}

/** The fields every Kubernetes object shares. */
export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata?: ObjectMeta;
}

/**
 * A `metav1.Time` as kube-apiserver writes it: RFC 3339 in whole seconds, UTC. `at`: epoch ms (default: now) or an
 * ISO 8601 string, whose fraction is dropped.
 */
export function kubeTime(at: number | string = Date.now()): string {
  return (typeof at === 'string' ? at : new Date(at).toISOString()).replace(/\.\d+Z$/, 'Z');
}
