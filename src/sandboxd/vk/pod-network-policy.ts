/**
 * The NetworkPolicies that select a microVM pod, as the template layer of its VM's egress policy (CRD layout,
 * docs/virtual-kubelet.md "NetworkPolicy"). Kubernetes semantics: a policy selects a pod when its `podSelector`
 * matches the pod's labels in the policy's namespace and its `policyTypes` include Egress (absent policyTypes:
 * Egress when the policy has egress rules, kube-apiserver's defaulting); once any policy selects the pod, egress is
 * what the union of their rules allows. One difference: a pod no policy selects keeps the egress lane's secure
 * default (internal ranges denied), not Kubernetes' allow-all, so a namespace without policies never opens the node's
 * and the cluster's private addresses to a guest.
 *
 * Ingress the same way, at the VM's pod address (src/vmm/net): the policies whose `policyTypes` include Ingress (absent
 * policyTypes: always, kube-apiserver's defaulting) give the ingress layer from their rules' `from` ipBlocks and ports;
 * no such policy = no ingress layer (every peer routed there may connect, Kubernetes' default).
 *
 * Pure functions; pod-lifecycle.ts reads the policies from an informer and applies the result.
 */
import type { LabelSelector, NetworkPolicyEgressRule, NetworkPolicyIngressRule } from '../../api/core.js';
import {
  cidrProblem,
  MAX_EGRESS_CIDRS,
  MAX_EGRESS_RULES,
  networkPolicyEgressLayer,
  networkPolicyIngressLayer,
  type EgressLayer,
} from '../../api/vm-network.js';
import { labelSelectorFromObject } from '../../apiserver/selectors.js';
import type { KubeObject } from '../../kube/index.js';

/** The slice of networking.k8s.io/v1 NetworkPolicy read here. */
export interface NetworkPolicy extends KubeObject {
  spec?: {
    podSelector?: LabelSelector;
    policyTypes?: string[];
    egress?: NetworkPolicyEgressRule[];
    ingress?: NetworkPolicyIngressRule[];
  };
}

/** What a pod is matched by: its namespace and labels. */
export interface PodIdentity {
  metadata: { namespace?: string; labels?: Record<string, string> };
}

/** The EgressLayer's `source` bound (src/api/vm-network.ts EgressLayerSchema). */
const MAX_SOURCE = 300;

type Direction = 'Ingress' | 'Egress';

/** Whether `np` governs `pod`'s egress. */
export const selectsEgressOf = (np: NetworkPolicy, pod: PodIdentity): boolean => selects(np, pod, 'Egress');

/** Whether `np` governs who may connect to `pod`. */
export const selectsIngressOf = (np: NetworkPolicy, pod: PodIdentity): boolean => selects(np, pod, 'Ingress');

/**
 * Whether `np` governs `pod` in `direction`. Absent policyTypes are kube-apiserver's default: Ingress always, Egress
 * when the policy has egress rules. A podSelector that cannot be evaluated (kube-apiserver's validation keeps such
 * objects out) selects nothing; an absent one is the empty selector (every pod), as the Go zero value is.
 */
function selects(np: NetworkPolicy, pod: PodIdentity, direction: Direction): boolean {
  if ((np.metadata.namespace ?? '') !== (pod.metadata.namespace ?? '')) return false;
  const spec = np.spec ?? {};
  const types = spec.policyTypes ?? ['Ingress', ...((spec.egress ?? []).length ? ['Egress'] : [])];
  if (!types.includes(direction)) return false;
  return labelSelectorFromObject(spec.podSelector)?.matches(pod.metadata.labels ?? {}) ?? false;
}

export interface PodLayer {
  /** The layer; undefined when no policy selects the pod (egress: the secure default; ingress: every peer). */
  layer: EgressLayer | undefined;
  /** The selecting policies, `<namespace>/<name>`, sorted. */
  policies: string[];
  /**
   * Rules left out so the layer fits the VM's bounds (MAX_EGRESS_RULES, MAX_EGRESS_CIDRS) or because a CIDR is not
   * one: each would only have allowed more, so leaving it out denies more, never less. The caller warns about it.
   */
  dropped: number;
}

/**
 * The template layer for `pod` from every policy in `policies` that selects it: one layer of the union of their egress
 * rules (NetworkPolicy rules only ever allow, so the union of the allows is Kubernetes' "allowed by any policy").
 * Policies are taken in name order, so the same set always gives the same layer (a re-apply compares layers).
 */
export const podEgressLayer = (pod: PodIdentity, policies: readonly NetworkPolicy[]): PodLayer =>
  podLayer(pod, policies, 'Egress');

/** The ingress layer for `pod`: podEgressLayer's union over the policies selecting it for Ingress, from their rules. */
export const podIngressLayer = (pod: PodIdentity, policies: readonly NetworkPolicy[]): PodLayer =>
  podLayer(pod, policies, 'Ingress');

function podLayer(pod: PodIdentity, policies: readonly NetworkPolicy[], direction: Direction): PodLayer {
  const selecting = policies
    .filter((np) => selects(np, pod, direction))
    .sort((a, b) => (a.metadata.name ?? '').localeCompare(b.metadata.name ?? ''));
  if (!selecting.length) return { layer: undefined, policies: [], dropped: 0 };
  const names = selecting.map((np) => `${np.metadata.namespace ?? ''}/${np.metadata.name ?? ''}`);
  let source = `NetworkPolicy ${names.join(', ')}`;
  if (source.length > MAX_SOURCE) source = `${source.slice(0, MAX_SOURCE - 3)}...`;
  const layer =
    direction === 'Egress'
      ? networkPolicyEgressLayer(
          source,
          selecting.flatMap((np) => np.spec?.egress ?? []),
        )
      : networkPolicyIngressLayer(
          source,
          selecting.flatMap((np) => np.spec?.ingress ?? []),
        );
  const fits = layer.rules.filter(
    (r) =>
      r.to.length <= MAX_EGRESS_CIDRS &&
      (r.except?.length ?? 0) <= MAX_EGRESS_CIDRS &&
      [...r.to, ...(r.except ?? [])].every((c) => cidrProblem(c) === undefined),
  );
  const rules = fits.slice(0, MAX_EGRESS_RULES);
  return { layer: { ...layer, rules }, policies: names, dropped: layer.rules.length - rules.length };
}
