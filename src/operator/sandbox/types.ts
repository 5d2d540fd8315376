/**
 * The object shapes the Sandbox controller reads and writes. src/api types the agent-sandbox kinds and the
 * embedded core specs; the top-level core objects (Pod, Service, PVC) are typed here, only as far as the
 * controller looks into them.
 */
import type { Condition, PersistentVolumeClaimSpec, PodSpec, Sandbox } from '../../api/index.js';
import type { KubeObject, ObjectMeta } from '../../kube/index.js';

/** A Sandbox as the cache holds it (metadata always present). */
export type SandboxObject = Sandbox & { metadata: ObjectMeta };

export interface PodCondition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  reason?: string;
  message?: string;
  lastTransitionTime?: string;
}

export interface Pod extends KubeObject {
  spec: PodSpec;
  status?: {
    phase?: string;
    conditions?: PodCondition[];
    podIP?: string;
    podIPs?: Array<{ ip: string }>;
  };
}

export interface ServicePort {
  name?: string;
  port: number;
  protocol?: string;
  targetPort?: number | string;
  appProtocol?: string;
}

export interface Service extends KubeObject {
  spec: {
    clusterIP?: string;
    clusterIPs?: string[];
    selector?: Record<string, string>;
    ports?: ServicePort[];
    type?: string;
    [key: string]: unknown;
  };
}

export interface PersistentVolumeClaim extends KubeObject {
  spec: PersistentVolumeClaimSpec;
  status?: { phase?: string };
}

export type { Condition };
