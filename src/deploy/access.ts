/**
 * The RBAC objects of a component from its grants (rbac.ts): a ServiceAccount, one ClusterRole for its
 * cluster-wide rules, one Role per namespace it writes in (the release namespace, kube-node-lease), and the
 * bindings, including to the roles Kubernetes itself defines.
 */
import type { Manifest } from './params.js';
import { meta, type BuildContext } from './model.js';
import { BUILTIN_BINDINGS, GRANTS, USER_ROLES, type ComponentName, type PolicyRule } from './rbac.js';

const RBAC = 'rbac.authorization.k8s.io/v1';

/** Copies of the rules (the grants are shared, the manifests are mutated by later steps). */
function rulesOf(rules: readonly PolicyRule[]): PolicyRule[] {
  return rules.map((r) => ({
    apiGroups: [...r.apiGroups],
    resources: [...r.resources],
    verbs: [...r.verbs],
    ...(r.resourceNames ? { resourceNames: [...r.resourceNames] } : {}),
  }));
}

export function accessObjects(component: ComponentName, c: BuildContext): Manifest[] {
  const subject = { kind: 'ServiceAccount', name: component, namespace: c.ns };
  const out: Manifest[] = [{ apiVersion: 'v1', kind: 'ServiceAccount', metadata: meta(component, component, c.ns) }];
  const grants = GRANTS[component];
  const cluster = grants.filter((g) => g.scope === 'cluster').map((g) => g.rule);
  if (cluster.length) {
    out.push({ apiVersion: RBAC, kind: 'ClusterRole', metadata: meta(component, component), rules: rulesOf(cluster) });
    out.push({
      apiVersion: RBAC,
      kind: 'ClusterRoleBinding',
      metadata: meta(component, component),
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: component },
      subjects: [subject],
    });
  }
  const namespaces = new Map<string, { ns: BuildContext['ns'] | string; rules: PolicyRule[] }>();
  for (const g of grants) {
    if (g.scope === 'cluster') continue;
    const key = g.scope === 'release' ? '' : g.scope.namespace;
    const entry = namespaces.get(key) ?? { ns: g.scope === 'release' ? c.ns : key, rules: [] };
    entry.rules.push(g.rule);
    namespaces.set(key, entry);
  }
  for (const { ns, rules } of namespaces.values()) {
    out.push({ apiVersion: RBAC, kind: 'Role', metadata: meta(component, component, ns), rules: rulesOf(rules) });
    out.push({
      apiVersion: RBAC,
      kind: 'RoleBinding',
      metadata: meta(component, component, ns),
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: component },
      subjects: [subject],
    });
  }
  for (const b of BUILTIN_BINDINGS[component]) {
    const name = `${component}:${b.name}`;
    out.push({
      apiVersion: RBAC,
      kind: b.kind === 'ClusterRole' ? 'ClusterRoleBinding' : 'RoleBinding',
      metadata: meta(name, component, b.namespace),
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: b.kind, name: b.name },
      subjects: [subject],
    });
  }
  return out;
}

/** sandbox-apiserver:edit and :view, aggregated into the built-in roles so namespace users get sandboxes. */
export function userRoles(component: ComponentName): Manifest[] {
  return USER_ROLES.map((r) => ({
    apiVersion: RBAC,
    kind: 'ClusterRole',
    metadata: {
      ...meta(`${component}:${r.suffix}`, component),
      labels: {
        ...(meta(component, component)['labels'] as Record<string, string>),
        ...Object.fromEntries(r.aggregateTo.map((to) => [`rbac.authorization.k8s.io/aggregate-to-${to}`, 'true'])),
      },
    },
    rules: rulesOf(r.rules),
  }));
}
