/**
 * Upstream agent-sandbox's in-pod data plane ("upstream sandboxd": gRPC process.v1.ProcessService on 9090, the REST
 * file API on 8080; not this project's node daemon) served by the guest agent of a pod's microVM. A pod asks for it
 * the way upstream's own manifests do: a container declaring containerPort 8080 and 9090. Warm-pool VMs boot before
 * their pod is known, so the node starts the service in the running guest (`upstream.start`) and reports the Pod
 * Ready only once the agent has answered, which it does after both ports accept: upstream's Python and Go SDKs
 * send their first request without probing. See docs/runtime-adapter.md "How upstream's SDKs reach a microVM".
 */
import { SandboxError } from '../../errors.js';
import { check, UpstreamStartResult } from '../../guest/agent-schemas.js';
import type { MicrovmHandle } from '../../vmm/driver.js';
import type { Container, Pod } from './types.js';

/** Upstream's defaults (--rest-port, --grpc-port): what its SDKs dial through the pod port-forward. */
export const UPSTREAM_REST_PORT = 8080;
export const UPSTREAM_GRPC_PORT = 9090;
/** Upstream's --root-dir default; the guest's root overlay is writable, so the agent creates it. */
export const UPSTREAM_ROOT_DIR = '/workspace';
/**
 * Every guest address, as upstream binds (its --listen-host default): guest loopback for the pod port-forward (the
 * agent's `tcp.connect`), and the NIC that the VM's pod address is DNAT'd to for upstream's in-cluster SDK modes
 * (`in-cluster-pod-ip`, `in-cluster-service`). Not the NIC's address alone: the port-forward dials loopback, and a
 * NIC-less VM has loopback only. The service has no authentication (neither has upstream's), so what guards it is
 * the VM's ingress layer, outside the guest: the Ingress NetworkPolicies selecting the Pod (a template's managed
 * secure default admits no cluster peer at all); a VM without a NIC is reachable through the agent only.
 */
export const UPSTREAM_LISTEN_HOST = '0.0.0.0';

/** What the guest agent's `upstream.start` takes (docs/agent-protocol.md, Operations). */
export interface UpstreamSandboxdSpec {
  path: string;
  host: string;
  restPort: number;
  grpcPort: number;
  env: Record<string, string>;
  uid?: number;
  gid?: number;
}

const RESULT = check(UpstreamStartResult);

function declares(c: Container, port: number): boolean {
  return (c.ports ?? []).some((p) => p.containerPort === port && (p.protocol ?? 'TCP') === 'TCP');
}

/** The fields a downward-API fieldRef may name here (the rest are not known before the pod runs, or are the node's). */
function fieldValue(pod: Pod, fieldPath: string): string | undefined {
  switch (fieldPath) {
    case 'metadata.name':
      return pod.metadata.name;
    case 'metadata.namespace':
      return pod.metadata.namespace;
    case 'metadata.uid':
      return pod.metadata.uid;
    case 'spec.nodeName':
      return pod.spec.nodeName;
    case 'spec.serviceAccountName':
      return pod.spec.serviceAccountName;
    default:
      return undefined;
  }
}

/**
 * The upstream sandboxd a pod asks for, or undefined: the first container declaring both TCP ports. Its env (literal
 * values and the fieldRefs above) becomes the daemon's environment, which processes inherit and /v1/metadata filters;
 * its runAsUser/runAsGroup (else the pod's) is the user processes run as and who owns /workspace.
 */
export function upstreamSandboxdFor(pod: Pod): UpstreamSandboxdSpec | undefined {
  const c = pod.spec.containers.find((x) => declares(x, UPSTREAM_REST_PORT) && declares(x, UPSTREAM_GRPC_PORT));
  if (!c) return undefined;
  const env: Record<string, string> = {};
  for (const e of c.env ?? []) {
    const v = e.value ?? (e.valueFrom?.fieldRef ? fieldValue(pod, e.valueFrom.fieldRef.fieldPath) : undefined);
    if (v !== undefined) env[e.name] = v;
  }
  const uid = c.securityContext?.runAsUser ?? pod.spec.securityContext?.runAsUser;
  const gid = c.securityContext?.runAsGroup ?? pod.spec.securityContext?.runAsGroup;
  return {
    path: UPSTREAM_ROOT_DIR,
    host: UPSTREAM_LISTEN_HOST,
    restPort: UPSTREAM_REST_PORT,
    grpcPort: UPSTREAM_GRPC_PORT,
    env,
    ...(uid !== undefined ? { uid } : {}),
    ...(gid !== undefined ? { gid } : {}),
  };
}

/**
 * Start upstream sandboxd in the VM's guest and wait until both ports accept. Idempotent in the guest (a second call
 * answers `already`), so a node daemon that restarts and adopts its VMs simply asks again.
 */
export async function startUpstreamSandboxd(
  vm: Pick<MicrovmHandle, 'agent'>,
  spec: UpstreamSandboxdSpec,
): Promise<void> {
  const agent = vm.agent;
  if (!agent.info.features.includes('upstream')) {
    throw new SandboxError('agent.version', 'the guest agent cannot serve upstream sandboxd', {
      hint: 'rebuild the guest image (its agent predates upstream sandboxd)',
    });
  }
  await agent.request('upstream.start', { ...spec }, { result: RESULT, timeoutMs: 30_000 });
}
