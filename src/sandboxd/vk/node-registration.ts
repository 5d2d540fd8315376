/**
 * Node objects and their heartbeats. A virtual node is registered like a kubelet registers itself: create the Node
 * with its status (nodes accept status on create), then keep a `coordination.k8s.io` Lease in `kube-node-lease`
 * renewed every 10 s (the node lifecycle controller reads liveness from it) and refresh the Node's conditions
 * every minute. Labels and taints are the runtime adapter's contract (docs/runtime-adapter.md).
 */
import { hostname } from 'node:os';
import { isNotFound, Leases, Nodes, type KubeClient } from '../../kube/index.js';
import type { Logger } from '../../log/logger.js';
import type { Lease, Node, NodeCondition, Taint, VirtualNodeKind } from './types.js';

export const PROVIDER_TAINT_KEY = 'virtual-kubelet.io/provider';
export const NODE_LEASE_NAMESPACE = 'kube-node-lease';
/** What the apiserver reads from `status.declaredFeatures` to proxy exec/attach/port-forward as WebSockets. */
export const WEBSOCKET_FEATURE = 'ExtendWebSocketsToKubelet';
export const KUBELET_VERSION = 'v1.36.3-sandboxd';
const LEASE_DURATION_SECONDS = 40;

export interface NodeProfile {
  kind: VirtualNodeKind;
  labels: Record<string, string>;
  taint: Taint;
}

/** Labels and taint per node kind: what the runtime adapter's nodeSelector and toleration expect. */
export function nodeProfile(kind: VirtualNodeKind): NodeProfile {
  const common = { type: 'virtual-kubelet', 'kubernetes.io/os': 'linux', 'kubernetes.io/arch': 'amd64' };
  if (kind === 'vk-cocoon')
    return {
      kind,
      labels: {
        ...common,
        'node.kubernetes.io/instance-type': 'virtual-node',
        'node-role.kubernetes.io/cocoon-vm': '',
      },
      taint: { key: PROVIDER_TAINT_KEY, value: 'cocoon', effect: 'NoSchedule' },
    };
  return {
    kind,
    labels: { ...common, 'sandbox.cocoonstack.io/runtime': 'sandboxd' },
    taint: { key: PROVIDER_TAINT_KEY, value: 'sandboxd', effect: 'NoSchedule' },
  };
}

export interface NodeSpecInput {
  name: string;
  kind: VirtualNodeKind;
  hostAddress: string;
  kubeletPort: number;
  maxPods: number;
}

function conditions(now: string, since: string): NodeCondition[] {
  const c = (type: string, status: NodeCondition['status'], reason: string, message: string): NodeCondition => ({
    type,
    status,
    reason,
    message,
    lastHeartbeatTime: now,
    lastTransitionTime: since,
  });
  return [
    c('Ready', 'True', 'KubeletReady', 'sandboxd virtual kubelet is ready'),
    c('MemoryPressure', 'False', 'KubeletHasSufficientMemory', 'no memory pressure'),
    c('DiskPressure', 'False', 'KubeletHasNoDiskPressure', 'no disk pressure'),
    c('PIDPressure', 'False', 'KubeletHasSufficientPID', 'no PID pressure'),
    c('NetworkUnavailable', 'False', 'RouteCreated', 'microVMs need no pod network'),
  ];
}

/** `since` = when this process registered the node (the conditions' last transition). */
export function nodeStatus(input: NodeSpecInput, now: string, since = now): NonNullable<Node['status']> {
  const resources = { cpu: '4000', memory: '8Ti', pods: String(input.maxPods), 'ephemeral-storage': '1Ti' };
  return {
    capacity: resources,
    allocatable: resources,
    conditions: conditions(now, since),
    addresses: [
      { type: 'InternalIP', address: input.hostAddress },
      { type: 'Hostname', address: input.name },
    ],
    daemonEndpoints: { kubeletEndpoint: { Port: input.kubeletPort } },
    nodeInfo: {
      machineID: input.name,
      systemUUID: input.name,
      bootID: '',
      kernelVersion: '',
      osImage: `sandboxd microVMs on ${hostname()}`,
      containerRuntimeVersion: 'sandboxd://0.1.0',
      kubeletVersion: KUBELET_VERSION,
      kubeProxyVersion: '',
      operatingSystem: 'linux',
      architecture: 'amd64',
    },
    declaredFeatures: [WEBSOCKET_FEATURE],
  };
}

export function desiredNode(input: NodeSpecInput, now: string): Node {
  const profile = nodeProfile(input.kind);
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: {
      name: input.name,
      labels: { ...profile.labels, 'kubernetes.io/hostname': input.name },
      annotations: { 'sandbox.cocoonstack.io/virtual-kubelet': input.kind },
    },
    spec: { taints: [profile.taint], providerID: `sandboxd://${input.name}` },
    status: nodeStatus(input, now),
  };
}

/** Create the Node, or bring an existing one (from before a restart) back to our labels, taint and status. */
export async function registerNode(client: KubeClient, input: NodeSpecInput, log: Logger): Promise<Node> {
  const now = new Date().toISOString();
  const want = desiredNode(input, now);
  let node: Node;
  try {
    node = await client.get<Node>(Nodes, undefined, input.name);
  } catch (err) {
    if (!isNotFound(err)) throw err;
    node = await client.create<Node>(Nodes, want);
    log.info({ node: input.name, kind: input.kind }, 'registered virtual node');
    return node;
  }
  // Keep taints others added (e.g. node.kubernetes.io/unreachable, which the lifecycle controller removes itself).
  const taints = node.spec?.taints ?? [];
  const profile = nodeProfile(input.kind);
  const hasOurTaint = taints.some((t) => t.key === profile.taint.key);
  const labels = node.metadata.labels ?? {};
  const missingLabels = Object.entries(want.metadata.labels ?? {}).filter(([k, v]) => labels[k] !== v);
  if (!hasOurTaint || missingLabels.length) {
    await client.patch<Node>(
      Nodes,
      undefined,
      input.name,
      {
        metadata: { labels: Object.fromEntries(missingLabels) },
        ...(hasOurTaint ? {} : { spec: { taints: [...taints, profile.taint] } }),
      },
      'merge',
    );
  }
  node = await client.patch<Node>(Nodes, undefined, input.name, { status: want.status }, 'merge', {
    subresource: 'status',
  });
  log.info({ node: input.name, kind: input.kind }, 're-registered existing virtual node');
  return node;
}

/** Renew (or create) the node's Lease; the node lifecycle controller treats a fresh lease as a live kubelet. */
export async function renewLease(client: KubeClient, node: Node): Promise<void> {
  const name = node.metadata.name ?? '';
  const now = new Date().toISOString().replace('Z', '000Z'); // MicroTime: RFC 3339 with microseconds
  try {
    await client.patch<Lease>(
      Leases,
      NODE_LEASE_NAMESPACE,
      name,
      { spec: { renewTime: now, holderIdentity: name } },
      'merge',
    );
  } catch (err) {
    if (!isNotFound(err)) throw err;
    await client.create<Lease>(Leases, {
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: {
        name,
        namespace: NODE_LEASE_NAMESPACE,
        ownerReferences: node.metadata.uid
          ? [{ apiVersion: 'v1', kind: 'Node', name, uid: node.metadata.uid }]
          : undefined,
      },
      spec: { holderIdentity: name, leaseDurationSeconds: LEASE_DURATION_SECONDS, renewTime: now },
    });
  }
}

/** Refresh the Ready/pressure conditions' heartbeat (and repair anything the lifecycle controller flipped). */
export async function heartbeatNodeStatus(client: KubeClient, input: NodeSpecInput, since: string): Promise<void> {
  const now = new Date().toISOString();
  await client.patch<Node>(Nodes, undefined, input.name, { status: nodeStatus(input, now, since) }, 'merge', {
    subresource: 'status',
  });
}
