/**
 * What each component reads and writes on the Kubernetes API, as RBAC rules: the one list the manifests' Roles
 * and ClusterRoles are generated from. Each grant names the code that uses it; test/deploy/rbac.test.ts runs the
 * components with a ServiceAccount bound to exactly these rules against the real apiserver (and checks that
 * taking a rule away breaks the test that needs it), so a controller that starts using a resource not listed here
 * fails a test instead of a cluster.
 */
import {
  CONVERTIBLE_RESOURCES,
  crdNameOf,
  NodeInventoryResource,
  SandboxClaimResource,
  SandboxResource,
  SandboxTemplateResource,
  SandboxWarmPoolResource,
  type ResourceDef,
} from '../api/index.js';
import { SANDBOX_ACTIONS } from '../apiserver/sandboxes/actions.js';
import { SNAPSHOTS } from '../apiserver/sandboxes/snapshots.js';

export interface PolicyRule {
  apiGroups: string[];
  resources: string[];
  verbs: string[];
  resourceNames?: string[];
}

/** Where a grant applies: cluster-wide (ClusterRole), the release namespace, or a fixed namespace (Role). */
export type GrantScope = 'cluster' | 'release' | { namespace: string };

export interface Grant {
  scope: GrantScope;
  rule: PolicyRule;
  /** The code that needs it (kept next to the rule so a reader can check it). */
  usedBy: string;
}

export type ComponentName = 'sandbox-operator' | 'sandboxd' | 'sandbox-apiserver';

const READ = ['get', 'list', 'watch'];

/** Warm pools and the templates their pool keys derive from: sandbox-apiserver's driver and sandboxd's gateway. */
const READ_POOLS_AND_TEMPLATES: PolicyRule = {
  apiGroups: [SandboxWarmPoolResource.group],
  resources: ['sandboxwarmpools', 'sandboxtemplates'],
  verbs: READ,
};
const ours = (r: ResourceDef, sub = '') => ({ apiGroups: [r.group], resources: [`${r.plural}${sub}`] });
/** sandbox-apiserver's snapshots (src/apiserver/sandboxes/snapshots.ts); served only, never a CRD. */
const SNAPSHOTS_RULE = { apiGroups: [SNAPSHOTS.group], resources: [SNAPSHOTS.resource] };
const core = (...resources: string[]) => ({ apiGroups: [''], resources });

/**
 * Children carry ownerReferences with blockOwnerDeletion, which clusters running the
 * OwnerReferencesPermissionEnforcement admission plugin (OpenShift, hardened clusters) allow only to who may
 * update the owner's finalizers.
 */
const finalizersOf = (owners: ResourceDef[]): PolicyRule => ({
  apiGroups: [...new Set(owners.map((r) => r.group))],
  resources: owners.map((r) => `${r.plural}/finalizers`),
  verbs: ['update'],
});

export const GRANTS: Record<ComponentName, readonly Grant[]> = {
  'sandbox-operator': [
    {
      scope: 'cluster',
      rule: { ...ours(SandboxResource), verbs: [...READ, 'create', 'update', 'patch', 'delete'] },
      usedBy:
        'Sandbox controller (expiry delete), warm-pool controller (create/update/delete members), claim controller (adopt by patch, cold create, delete)',
    },
    {
      scope: 'cluster',
      rule: { ...ours(SandboxResource, '/status'), verbs: ['patch'] },
      usedBy: 'Sandbox reconciler writeStatus',
    },
    {
      scope: 'cluster',
      rule: { ...ours(SandboxClaimResource), verbs: [...READ, 'patch', 'delete'] },
      usedBy: 'claim controller (finalizer/annotations, shutdownPolicy Delete)',
    },
    {
      scope: 'cluster',
      rule: {
        apiGroups: [SandboxClaimResource.group],
        resources: [`${SandboxClaimResource.plural}/status`, `${SandboxWarmPoolResource.plural}/status`],
        verbs: ['patch'],
      },
      usedBy: 'claim and warm-pool controllers status writes',
    },
    {
      scope: 'cluster',
      rule: { ...ours(SandboxWarmPoolResource), verbs: READ },
      usedBy: 'warm-pool and claim controllers informers',
    },
    {
      scope: 'cluster',
      rule: { ...ours(SandboxTemplateResource), verbs: [...READ, 'patch'] },
      usedBy: 'template controller (template-ref hash label), informers',
    },
    {
      scope: 'cluster',
      rule: finalizersOf([SandboxResource, SandboxTemplateResource, SandboxWarmPoolResource, SandboxClaimResource]),
      usedBy: 'owner references of Pods, Services, PVCs, NetworkPolicies and pool/claim Sandboxes',
    },
    {
      scope: 'cluster',
      rule: { ...core('pods'), verbs: [...READ, 'create', 'patch', 'delete'] },
      usedBy: 'Sandbox pod reconciler',
    },
    {
      scope: 'cluster',
      rule: { ...core('services'), verbs: [...READ, 'create', 'update', 'patch', 'delete'] },
      usedBy: 'Sandbox service reconciler (adoption is an update)',
    },
    {
      scope: 'cluster',
      rule: { ...core('persistentvolumeclaims'), verbs: [...READ, 'create', 'patch'] },
      usedBy: 'Sandbox PVC reconciler (PVCs outlive their Sandbox: never deleted)',
    },
    {
      scope: 'cluster',
      rule: {
        apiGroups: ['networking.k8s.io'],
        resources: ['networkpolicies'],
        verbs: [...READ, 'create', 'update', 'delete'],
      },
      usedBy: 'template controller (Managed NetworkPolicy), claim controller (legacy per-claim policy cleanup)',
    },
    {
      scope: 'cluster',
      rule: { apiGroups: ['events.k8s.io'], resources: ['events'], verbs: ['create'] },
      usedBy: 'Sandbox lifecycle Events, extension controllers recordEvent',
    },
    {
      scope: 'cluster',
      rule: {
        apiGroups: ['apiextensions.k8s.io'],
        resources: ['customresourcedefinitions'],
        verbs: ['get', 'patch'],
        resourceNames: CONVERTIBLE_RESOURCES.map(crdNameOf),
      },
      usedBy:
        'conversion webhook certificates: caBundle and clientConfig of the converted CRDs (--manage-webhook-certs)',
    },
    {
      scope: 'release',
      rule: { apiGroups: ['coordination.k8s.io'], resources: ['leases'], verbs: ['get', 'create', 'update'] },
      usedBy: 'leader election (--leader-elect)',
    },
    {
      scope: 'release',
      rule: { ...core('secrets'), verbs: ['get', 'create', 'update'] },
      usedBy: 'conversion webhook certificate Secret (--manage-webhook-certs)',
    },
  ],
  sandboxd: [
    {
      scope: 'cluster',
      rule: { ...ours(NodeInventoryResource), verbs: ['create', 'patch'] },
      usedBy: 'NodeInventory publisher (server-side apply: patch, and create for the first apply)',
    },
    {
      scope: 'cluster',
      rule: { ...ours(NodeInventoryResource), verbs: READ },
      usedBy: 'checkpoint placement: the peer nodes an owner probe and a heal ask (docs/placement.md)',
    },
    {
      scope: 'cluster',
      rule: { apiGroups: ['authentication.k8s.io'], resources: ['tokenreviews'], verbs: ['create'] },
      usedBy: 'claim gateway with --gateway-identity=kubernetes: who the bearer token is (docs/claim-gateway.md)',
    },
    {
      scope: 'cluster',
      rule: { apiGroups: ['authorization.k8s.io'], resources: ['subjectaccessreviews'], verbs: ['create'] },
      usedBy: 'claim gateway with --gateway-identity=kubernetes: may the caller create sandboxclaims there',
    },
    {
      scope: 'cluster',
      rule: READ_POOLS_AND_TEMPLATES,
      usedBy: 'claim gateway informers: the pool key of a claimed warm pool',
    },
    {
      scope: 'cluster',
      rule: { ...ours(SandboxClaimResource), verbs: [...READ, 'create', 'patch'] },
      usedBy: 'claim gateway: SandboxClaims recorded for its deliveries, and orphan adoption',
    },
    {
      scope: 'cluster',
      rule: { ...ours(SandboxClaimResource, '/status'), verbs: ['patch'] },
      usedBy: 'claim gateway: Bound/Ready of the claims it delivered',
    },
    {
      scope: 'cluster',
      rule: { apiGroups: ['events.k8s.io'], resources: ['events'], verbs: ['create'] },
      usedBy: 'claim gateway: the SandboxClaimed Event on each Sandbox it delivered',
    },
    {
      scope: 'cluster',
      rule: { ...core('nodes'), verbs: ['get', 'list', 'watch', 'create', 'patch', 'delete'] },
      usedBy:
        'virtual-kubelet node registration (delete with --destroy-on-exit), and its cordon watch (a cordon drains sandboxd)',
    },
    {
      scope: 'cluster',
      rule: { ...core('nodes/status'), verbs: ['patch'] },
      usedBy: 'virtual-kubelet node status',
    },
    {
      scope: 'cluster',
      rule: { ...core('pods'), verbs: ['list', 'watch', 'patch', 'delete'] },
      usedBy: 'virtual-kubelet pod lifecycle (pods bound to its nodes)',
    },
    {
      scope: 'cluster',
      rule: { ...core('pods/status'), verbs: ['patch'] },
      usedBy: 'virtual-kubelet pod status',
    },
    {
      scope: 'cluster',
      rule: { ...core('events'), verbs: ['create'] },
      usedBy: 'virtual-kubelet pod events',
    },
    {
      scope: 'cluster',
      rule: { apiGroups: ['networking.k8s.io'], resources: ['networkpolicies'], verbs: READ },
      usedBy: "virtual-kubelet: the egress NetworkPolicies that select a microVM pod, enforced on its VM's network",
    },
    {
      scope: { namespace: 'kube-node-lease' },
      rule: { apiGroups: ['coordination.k8s.io'], resources: ['leases'], verbs: ['get', 'create', 'patch'] },
      usedBy: 'virtual-kubelet node heartbeat Lease',
    },
  ],
  'sandbox-apiserver': [
    {
      scope: 'cluster',
      rule: { ...ours(NodeInventoryResource), verbs: READ },
      usedBy: 'Fleet: which nodes serve sandboxes and where',
    },
    {
      scope: 'cluster',
      rule: { ...core('namespaces'), verbs: READ },
      usedBy: 'create refused in a missing or terminating namespace (NamespaceLifecycle)',
    },
    {
      scope: 'cluster',
      rule: READ_POOLS_AND_TEMPLATES,
      usedBy: 'warm-pool driver informers (pools and the templates their keys are derived from)',
    },
    {
      scope: 'cluster',
      rule: { ...ours(SandboxWarmPoolResource), verbs: ['patch'] },
      usedBy: 'warm-pool driver served-by annotation (the operator leaves marked pools alone)',
    },
    {
      scope: 'cluster',
      rule: { ...ours(SandboxWarmPoolResource, '/status'), verbs: ['patch'] },
      usedBy: 'warm-pool driver status writes (replicas, readyReplicas)',
    },
    {
      scope: 'cluster',
      rule: { ...ours(SandboxClaimResource), verbs: [...READ, 'patch', 'delete'] },
      usedBy: 'claim binder: its informer, the adoption record (annotations), shutdownPolicy Delete',
    },
    {
      scope: 'cluster',
      rule: { ...ours(SandboxClaimResource, '/status'), verbs: ['patch'] },
      usedBy: 'claim binder status writes (status.sandbox, Ready, Finished)',
    },
    {
      scope: 'cluster',
      rule: { apiGroups: ['events.k8s.io'], resources: ['events'], verbs: ['create'] },
      usedBy: 'lifecycle verb Events on Sandboxes (SandboxPaused, SandboxForked, ...; --disable-sandbox-events)',
    },
    {
      scope: 'release',
      rule: { apiGroups: ['coordination.k8s.io'], resources: ['leases'], verbs: ['get', 'create', 'update'] },
      usedBy:
        'leader election of the warm-pool driver and the claim binder (Leases sandbox-apiserver-warm-pool-driver, sandbox-apiserver-claim-binder)',
    },
  ],
};

/**
 * Roles a component is bound to that Kubernetes itself defines (delegated authentication and authorization of an
 * aggregated apiserver, as k8s.io/apiserver expects).
 */
export const BUILTIN_BINDINGS: Record<
  ComponentName,
  ReadonlyArray<{ kind: 'ClusterRole' | 'Role'; name: string; namespace?: string }>
> = {
  'sandbox-operator': [],
  sandboxd: [],
  'sandbox-apiserver': [
    { kind: 'ClusterRole', name: 'system:auth-delegator' },
    { kind: 'Role', name: 'extension-apiserver-authentication-reader', namespace: 'kube-system' },
  ],
};

/**
 * The aggregated layout's roles for people (aggregated into the built-in admin/edit/view roles): sandboxes are
 * served by sandbox-apiserver, whose verbs are create/delete/get/list/watch plus the lifecycle actions, each a
 * `create` on its subresource (docs/aggregated-layout.md), listed from the subresources the server serves; the
 * snapshots those take are `sandboxsnapshots` (get/list/delete, from its storage's descriptor).
 */
export const USER_ROLES: ReadonlyArray<{ suffix: 'edit' | 'view'; aggregateTo: string[]; rules: PolicyRule[] }> = [
  {
    suffix: 'edit',
    aggregateTo: ['admin', 'edit'],
    rules: [
      { ...ours(SandboxResource), verbs: [...READ, 'create', 'delete'] },
      {
        ...ours(SandboxResource),
        resources: SANDBOX_ACTIONS.map((a) => `${SandboxResource.plural}/${a.name}`),
        verbs: ['create'],
      },
      { ...SNAPSHOTS_RULE, verbs: ['get', 'list', 'delete'] },
    ],
  },
  {
    suffix: 'view',
    aggregateTo: ['view'],
    rules: [
      { ...ours(SandboxResource), verbs: READ },
      { ...SNAPSHOTS_RULE, verbs: ['get', 'list'] },
    ],
  },
];
