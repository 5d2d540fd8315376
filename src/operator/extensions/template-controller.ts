/**
 * SandboxTemplate controller (docs/extensions.md "Template"): labels the template with its name hash and keeps its
 * NetworkPolicy `<template>-network-policy` — the user's rules or the secure default when Managed, deleted when
 * Unmanaged, and never touching a NetworkPolicy of that name that the template does not control.
 */
import { isDeepStrictEqual } from 'node:util';
import { fnv1a32, LabelKeys } from '../../api/index.js';
import {
  controllerRef,
  isAlreadyExists,
  isControlledBy,
  isNotFound,
  NetworkPolicies,
  SandboxTemplates,
  type KubeObject,
  type ReconcileRequest,
} from '../../kube/index.js';
import { registerController, type ControllerContext } from '../build.js';
import type { TemplateObj } from './support.js';
import { SandboxError } from '../../errors.js';

export interface NetworkPolicyObj extends KubeObject {
  spec?: Record<string, unknown>;
}

export const networkPolicyName = (template: string) => `${template}-network-policy`;

/** The desired NetworkPolicy spec for a Managed template (docs/extensions.md "Template"). */
export function desiredNetworkPolicySpec(template: TemplateObj, routerNamespace: string): Record<string, unknown> {
  const podSelector = { matchLabels: { [LabelKeys.sandboxTemplateRefHash]: fnv1a32(template.metadata.name!) } };
  const user = template.spec.networkPolicy;
  if (user) {
    const spec: Record<string, unknown> = { podSelector, policyTypes: ['Ingress', 'Egress'] };
    if (user.ingress) spec.ingress = user.ingress;
    if (user.egress) spec.egress = user.egress;
    return spec;
  }
  return {
    podSelector,
    policyTypes: ['Ingress', 'Egress'],
    ingress: [
      {
        from: [
          {
            namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': routerNamespace } },
            podSelector: { matchLabels: { app: 'sandbox-router' } },
          },
        ],
      },
    ],
    egress: [
      {
        to: [
          {
            ipBlock: { cidr: '0.0.0.0/0', except: ['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16', '169.254.0.0/16'] },
          },
          { ipBlock: { cidr: '::/0', except: ['fc00::/7', 'fe80::/10'] } },
        ],
      },
    ],
  };
}

/** Semantic equality: the apiserver may add empty lists/defaults we did not send; compare what we own. */
function sameSpec(have: Record<string, unknown> | undefined, want: Record<string, unknown>): boolean {
  if (!have) return false;
  const pick = (s: Record<string, unknown>) => ({
    podSelector: s.podSelector ?? {},
    policyTypes: s.policyTypes ?? [],
    ingress: s.ingress ?? [],
    egress: s.egress ?? [],
  });
  return isDeepStrictEqual(JSON.parse(JSON.stringify(pick(have))), JSON.parse(JSON.stringify(pick(want))));
}

export function registerTemplateController({ manager, config }: ControllerContext): void {
  const scope = { namespace: config.watchNamespace };
  const templates = manager.informer<TemplateObj>(SandboxTemplates, scope);
  const policies = manager.informer<NetworkPolicyObj>(NetworkPolicies, scope);
  const client = manager.client;

  const reconcile = async (req: ReconcileRequest): Promise<void> => {
    const template = templates.get(req.key);
    if (!template || template.metadata.deletionTimestamp) return;
    const ns = template.metadata.namespace!;
    const name = template.metadata.name!;
    const hash = fnv1a32(name);
    if (template.metadata.labels?.[LabelKeys.sandboxTemplateRefHash] !== hash)
      await client.patch(
        SandboxTemplates,
        ns,
        name,
        { metadata: { labels: { [LabelKeys.sandboxTemplateRefHash]: hash } } },
        'merge',
      );

    const npName = networkPolicyName(name);
    const existing = policies.getByName(ns, npName);
    if (template.spec.networkPolicyManagement === 'Unmanaged') {
      if (existing && isControlledBy(existing, template)) {
        await client
          .delete(NetworkPolicies, ns, npName, { preconditions: { uid: existing.metadata.uid } })
          .catch((err: unknown) => {
            if (!isNotFound(err)) throw err;
          });
      }
      return;
    }
    const spec = desiredNetworkPolicySpec(template, config.webhookNamespace);
    if (existing) {
      if (!isControlledBy(existing, template))
        throw new SandboxError(
          'sandbox-template.network-policy',
          `refusing to update NetworkPolicy "${npName}" as it is not controlled by SandboxTemplate "${name}"`,
        );
      if (sameSpec(existing.spec, spec)) return;
      await client.update(NetworkPolicies, { ...existing, spec });
      return;
    }
    try {
      await client.create(NetworkPolicies, {
        apiVersion: 'networking.k8s.io/v1',
        kind: 'NetworkPolicy',
        metadata: { name: npName, namespace: ns, ownerReferences: [controllerRef(template, SandboxTemplates)] },
        spec,
      } as NetworkPolicyObj);
    } catch (err) {
      // Created by an earlier pass the cache has not shown yet: its watch event brings the template back here.
      if (!isAlreadyExists(err)) throw err;
    }
  };

  manager
    .controller({ name: 'sandboxtemplate', workers: config.templateWorkers, reconcile })
    .for(templates)
    .owns(policies, SandboxTemplates.kind, SandboxTemplates.group);
}

registerController('sandboxtemplate', true, registerTemplateController);
