/**
 * The slices of core/v1 Pod, Node and coordination/v1 Lease that the virtual kubelet reads and writes. Only the
 * fields used here are typed; everything else passes through untouched (status writes are merge patches).
 */
import type { KubeObject } from '../../kube/index.js';

export interface Toleration {
  key?: string;
  operator?: 'Exists' | 'Equal';
  value?: string;
  effect?: string;
}

export interface Taint {
  key: string;
  value?: string;
  effect: 'NoSchedule' | 'PreferNoSchedule' | 'NoExecute';
}

export interface ContainerPort {
  containerPort: number;
  name?: string;
  protocol?: string;
}

export interface EnvVar {
  name: string;
  value?: string;
  valueFrom?: { fieldRef?: { fieldPath: string } };
}

export interface SecurityContext {
  runAsUser?: number;
  runAsGroup?: number;
}

export interface Container {
  name: string;
  image?: string;
  command?: string[];
  args?: string[];
  ports?: ContainerPort[];
  env?: EnvVar[];
  securityContext?: SecurityContext;
}

export interface PodCondition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  reason?: string;
  message?: string;
  lastTransitionTime?: string | null;
  lastProbeTime?: string | null;
}

export interface ContainerState {
  running?: { startedAt?: string };
  waiting?: { reason?: string; message?: string };
  terminated?: { exitCode: number; reason?: string; message?: string; startedAt?: string; finishedAt?: string };
}

export interface ContainerStatus {
  name: string;
  image: string;
  imageID: string;
  containerID?: string;
  ready: boolean;
  started?: boolean;
  restartCount: number;
  state: ContainerState;
  lastState?: ContainerState;
}

export interface PodStatus {
  phase?: 'Pending' | 'Running' | 'Succeeded' | 'Failed' | 'Unknown';
  reason?: string | null;
  message?: string | null;
  hostIP?: string;
  hostIPs?: Array<{ ip: string }>;
  podIP?: string;
  podIPs?: Array<{ ip: string }>;
  startTime?: string;
  conditions?: PodCondition[];
  containerStatuses?: ContainerStatus[];
}

export interface Pod extends KubeObject {
  spec: {
    nodeName?: string;
    containers: Container[];
    tolerations?: Toleration[];
    nodeSelector?: Record<string, string>;
    terminationGracePeriodSeconds?: number;
    securityContext?: SecurityContext;
    serviceAccountName?: string;
  };
  status?: PodStatus;
}

export interface NodeCondition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  reason?: string;
  message?: string;
  lastHeartbeatTime?: string;
  lastTransitionTime?: string;
}

export interface NodeStatus {
  capacity?: Record<string, string>;
  allocatable?: Record<string, string>;
  conditions?: NodeCondition[];
  addresses?: Array<{ type: string; address: string }>;
  daemonEndpoints?: { kubeletEndpoint?: { Port: number } };
  nodeInfo?: Record<string, string>;
  declaredFeatures?: string[];
}

export interface Node extends KubeObject {
  spec?: { taints?: Taint[]; providerID?: string; unschedulable?: boolean };
  status?: NodeStatus;
}

export interface Lease extends KubeObject {
  spec: {
    holderIdentity?: string;
    leaseDurationSeconds?: number;
    renewTime?: string;
    acquireTime?: string;
  };
}

/** The two node personalities one sandboxd registers (docs/runtime-adapter.md). */
export type VirtualNodeKind = 'vk-cocoon' | 'sandboxd';
