/**
 * Every well-known label and annotation key of the agent-sandbox API (docs/api.md "Well-known keys"), verbatim. Nothing
 * else in the project spells these strings out.
 */

/** Labels. */
export const LabelKeys = {
  /** hash(sandbox name); on Pod, Service and PVCs of a Sandbox. */
  sandboxNameHash: 'agents.x-k8s.io/sandbox-name-hash',
  /** `"true"`: an unowned Pod/Service/PVC may be adopted by a Sandbox. */
  adoptable: 'agents.x-k8s.io/adoptable',
  /** hash(pool name); warm pool membership. */
  warmPoolSandbox: 'agents.x-k8s.io/warm-pool-sandbox',
  /** hash(template name). */
  sandboxTemplateRefHash: 'agents.x-k8s.io/sandbox-template-ref-hash',
  /** hash(JSON(template blueprint)). */
  sandboxTemplateHash: 'agents.x-k8s.io/sandbox-template-hash',
  /** Deprecated upstream label: hash(JSON(template.spec.podTemplate)). */
  sandboxPodTemplateHash: 'agents.x-k8s.io/sandbox-pod-template-hash',
  /** `warm` or `cold`. */
  launchType: 'agents.x-k8s.io/launch-type',
  /** Free string on claims/sandboxes; normalized on Pods. */
  createdBy: 'agents.x-k8s.io/created-by',
  /** The claim UID, on the Sandbox and its pod template. */
  claimUid: 'agents.x-k8s.io/claim-uid',
} as const;

/** Annotations. */
export const AnnotationKeys = {
  podName: 'agents.x-k8s.io/pod-name',
  propagatedLabels: 'agents.x-k8s.io/propagated-labels',
  propagatedAnnotations: 'agents.x-k8s.io/propagated-annotations',
  /** Template name, on Sandboxes (and, by contract, on claims the claim controller resolved: docs/api.md). */
  sandboxTemplateRef: 'agents.x-k8s.io/sandbox-template-ref',
  /** Assigned sandbox name, on the SandboxClaim (adoption record). */
  sandboxName: 'agents.x-k8s.io/sandbox-name',
  controllerFirstObservedAt: 'agents.x-k8s.io/controller-first-observed-at',
  webhookFirstObservedAt: 'agents.x-k8s.io/webhook-first-observed-at',
  clientFirstRequestedAt: 'agents.x-k8s.io/client-first-requested-at',
  claimFirstReadyAt: 'agents.x-k8s.io/claim-first-ready-at',
  creationLatencyRecorded: 'agents.x-k8s.io/creation-latency-recorded',
  traceContext: 'opentelemetry.io/trace-context',
  safeToEvict: 'cluster-autoscaler.kubernetes.io/safe-to-evict',
  /** Upstream migration tooling marks shadow pools with these (not written by the operator). */
  migrationShadow: 'agents.x-k8s.io/migration-shadow',
  migrationSourceTemplate: 'agents.x-k8s.io/migration-source-template',
  /** Runtime adapter mode on the pod template (docs/runtime-adapter.md). */
  runtime: 'sandbox.cocoonstack.io/runtime',
} as const;

/**
 * Conversion bookkeeping (docs/api.md "Conversion"). The `v1alpha1-*-state` keys live on hub (v1beta1) objects and hold
 * what only v1alpha1 can express; the `v1beta1-*` keys live on v1alpha1 views and hold what only v1beta1 can express.
 * `v1beta1-<kind>-state` is ours (not the upstream's): it makes v1beta1 -> v1alpha1 -> v1beta1 exact (docs/api.md).
 */
export const ConversionKeys = {
  sandboxV1alpha1State: 'api.agents.x-k8s.io/v1alpha1-sandbox-state',
  sandboxTemplateV1alpha1State: 'api.agents.x-k8s.io/v1alpha1-sandboxtemplate-state',
  sandboxWarmPoolV1alpha1State: 'api.agents.x-k8s.io/v1alpha1-sandboxwarmpool-state',
  sandboxClaimV1alpha1State: 'api.agents.x-k8s.io/v1alpha1-sandboxclaim-state',
  volumeClaimTemplatesPolicy: 'api.agents.x-k8s.io/v1beta1-volume-claim-templates-policy',
  sandboxClaimVolumeClaimTemplates: 'api.agents.x-k8s.io/v1beta1-sandboxclaim-volume-claim-templates',
  sandboxV1beta1State: 'api.agents.x-k8s.io/v1beta1-sandbox-state',
  sandboxTemplateV1beta1State: 'api.agents.x-k8s.io/v1beta1-sandboxtemplate-state',
  sandboxWarmPoolV1beta1State: 'api.agents.x-k8s.io/v1beta1-sandboxwarmpool-state',
  sandboxClaimV1beta1State: 'api.agents.x-k8s.io/v1beta1-sandboxclaim-state',
} as const;

/**
 * Annotations the aggregated apiserver / runtime adapter use (`sandbox.cocoonstack.io/*`; docs/runtime-adapter.md,
 * docs/aggregated-layout.md).
 */
export const CocoonAnnotationKeys = {
  claimId: 'sandbox.cocoonstack.io/claim-id',
  address: 'sandbox.cocoonstack.io/address',
  token: 'sandbox.cocoonstack.io/token',
  deadline: 'sandbox.cocoonstack.io/deadline',
  net: 'sandbox.cocoonstack.io/net',
  ttlSeconds: 'sandbox.cocoonstack.io/ttl-seconds',
  /**
   * What the node does when the lease ends: `release` (default), `hibernate` (pause; the e2b API's autoPause) or
   * `pause-filesystem` (keep its files only; e2b's autoPause with keepMemory: false).
   */
  onExpiry: 'sandbox.cocoonstack.io/on-expiry',
  /**
   * Idle policy (on a Sandbox, its pod template or a SandboxTemplate's pod template, so on the Pod too): hibernate
   * the sandbox after this many seconds without use; the next exec, port-forward or envd request wakes it
   * (docs/sandboxd.md "Idle suspend"). An integer 1..MAX_IDLE_HIBERNATE_SECONDS; absent or 0: never.
   */
  idleHibernateSeconds: 'sandbox.cocoonstack.io/idle-hibernate-seconds',
  node: 'sandbox.cocoonstack.io/node',
  phase: 'sandbox.cocoonstack.io/phase',
  claim: 'sandbox.cocoonstack.io/claim',
  size: 'sandbox.cocoonstack.io/size',
  template: 'sandbox.cocoonstack.io/template',
  runtime: 'sandbox.cocoonstack.io/runtime',
  /** Input on a Sandbox (aggregated layout): start from this snapshot (a SandboxSnapshotResult's snapshotID). */
  snapshot: 'sandbox.cocoonstack.io/snapshot',
  /** On a SandboxWarmPool: `sandbox-apiserver` when its warm-pool driver fills it (the operator then leaves it alone). */
  servedBy: 'sandbox.cocoonstack.io/served-by',
  /** Label on a fork child: the Sandbox it was forked from. */
  forkedFrom: 'sandbox.cocoonstack.io/forked-from',
  /** On a Sandbox a node's claim gateway delivered: `claim-gateway` (docs/claim-gateway.md). */
  deliveredBy: 'sandbox.cocoonstack.io/delivered-by',
  /** On a gateway-delivered Sandbox: the SandboxWarmPool its claim named. */
  warmPool: 'sandbox.cocoonstack.io/warm-pool',
  /** Label on a SandboxClaim a node's claim gateway bound: that node (its gateway watches these). */
  gatewayNode: 'sandbox.cocoonstack.io/gateway-node',
  /** On a SandboxClaim a claim gateway bound: the Kubernetes user that made the claim. */
  claimedBy: 'sandbox.cocoonstack.io/claimed-by',
  /** On a NodeInventory (and a simulated node's objects): what simulates this node, when it is not real. */
  simulation: 'sandbox.cocoonstack.io/simulation',
  /** On a NodeInventory whose `entries` were capped: how many it lists of how many claims the node holds. */
  inventoryEntries: 'sandbox.cocoonstack.io/inventory-entries',
  /** On a NodeInventory while its node drains (docs/sandboxd.md "Draining"): since when, and the progress. */
  draining: 'sandbox.cocoonstack.io/draining',
  cocoonsetMode: 'cocoonset.cocoonstack.io/mode',
  cocoonsetManaged: 'cocoonset.cocoonstack.io/managed',
  cocoonsetImage: 'cocoonset.cocoonstack.io/image',
  cocoonsetOs: 'cocoonset.cocoonstack.io/os',
  vmName: 'vm.cocoonstack.io/name',
} as const;

/** Keys with these prefixes (and `opentelemetry.io/trace-context`) never propagate from a pod template to the Pod. */
export const SystemKeyPrefixes = ['agents.x-k8s.io/', 'extensions.agents.x-k8s.io/'] as const;

export function isSystemKey(key: string): boolean {
  return key === AnnotationKeys.traceContext || SystemKeyPrefixes.some((p) => key.startsWith(p));
}

/** Field owner the Sandbox controller uses on creates. */
export const SANDBOX_FIELD_OWNER = 'sandbox-controller';

/**
 * Prefix of the warm pool name a v1alpha1 claim with `warmpool: none|default` converts to (docs/api.md "The core
 * mapping per kind").
 */
export const SHADOW_POOL_PREFIX = 'shadow-pool-';

/**
 * A sandbox created through the e2b API takes e2b's public-traffic behaviour (`network.allowPublicTraffic`, on unless
 * the create turns it off): its in-sandbox ports other than envd's are served without a token (`"true"`). Written by
 * the e2b API only; every other sandbox's ports need its envd or traffic access token (src/api/envd-access.ts).
 */
export const E2B_PUBLIC_TRAFFIC_ANNOTATION = 'e2b.dev/public-traffic';

/**
 * The one list of the labels and annotations on a Sandbox that only servers write (materialized on every read, or
 * set by the claim binder, the claim gateway, a fork). A user who could set one would forge what the server says: a
 * claim's identity and address, a gateway delivery, a claim binding, a fork's parent. So the aggregated create
 * refuses them (422 naming the field) unless an internal writer allowed to write that key is creating, and a fork
 * drops the parent's before writing its own. Every check of "is this key the server's" reads this list.
 */
export const ServerWrittenSandboxKeys = {
  annotations: [
    // materialized from the node's row (entry.ts); the token only in the create answer
    CocoonAnnotationKeys.claimId,
    CocoonAnnotationKeys.address,
    CocoonAnnotationKeys.token,
    CocoonAnnotationKeys.deadline,
    // the claim gateway's delivery (gateway/request.ts) and the claim binder's Sandboxes (claim-binder.ts)
    CocoonAnnotationKeys.deliveredBy,
    CocoonAnnotationKeys.warmPool,
    CocoonAnnotationKeys.claimedBy,
    AnnotationKeys.sandboxTemplateRef,
    // the e2b API's public-traffic opt-in: ports without a token
    E2B_PUBLIC_TRAFFIC_ANNOTATION,
  ],
  labels: [
    // materialized selector axes (entry.ts)
    CocoonAnnotationKeys.node,
    CocoonAnnotationKeys.phase,
    // a fork's child names its parent; the claim binder's Sandbox names its claim
    CocoonAnnotationKeys.forkedFrom,
    LabelKeys.claimUid,
  ],
} as const satisfies Record<'annotations' | 'labels', readonly string[]>;

/** The keys of ServerWrittenSandboxKeys the aggregated claim binder writes on the Sandboxes it creates. */
export const ClaimBinderSandboxKeys: readonly string[] = [
  LabelKeys.claimUid,
  AnnotationKeys.sandboxTemplateRef,
  CocoonAnnotationKeys.warmPool,
];

export function isServerWrittenSandboxKey(kind: 'annotations' | 'labels', key: string): boolean {
  return (ServerWrittenSandboxKeys[kind] as readonly string[]).includes(key);
}

/** `map` without the server-written keys of its kind (what a fork or a template may carry into a new Sandbox). */
export function withoutServerWrittenKeys(
  kind: 'annotations' | 'labels',
  map: Readonly<Record<string, string>> | undefined,
): Record<string, string> {
  return Object.fromEntries(Object.entries(map ?? {}).filter(([k]) => !isServerWrittenSandboxKey(kind, k)));
}

/** The longest idle policy: a week (CocoonAnnotationKeys.idleHibernateSeconds, sandboxd's `idle_hibernate_seconds`). */
export const MAX_IDLE_HIBERNATE_SECONDS = 604_800;

/**
 * The idle policy an object's annotations give (CocoonAnnotationKeys.idleHibernateSeconds): seconds, undefined for
 * none (absent, empty or 0), or the problem as a message.
 */
export function idleSecondsAnnotation(annotations: Record<string, string> | undefined): number | undefined | string {
  const key = CocoonAnnotationKeys.idleHibernateSeconds;
  const raw = annotations?.[key]?.trim();
  if (!raw) return undefined;
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || n > MAX_IDLE_HIBERNATE_SECONDS)
    return `annotation ${key}="${raw}" must be a whole number of seconds from 0 (never) to ${MAX_IDLE_HIBERNATE_SECONDS}`;
  return n || undefined;
}
