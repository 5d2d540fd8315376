/**
 * Everything one install variant consists of, as parts (one template file each): the CRDs (from the same
 * builder as deploy/crds, conversion pointed at the release namespace), and per layout the components with their
 * RBAC, certificates and monitoring.
 */
import { ALL_RESOURCES, crdNameOf, SandboxResource } from '../api/index.js';
import { buildCrd } from '../api/crd.js';
import { accessObjects, userRoles } from './access.js';
import { apiServiceParts, certManagerParts, WEBHOOK_CERTIFICATE } from './certs.js';
import { APISERVER, OPERATOR, SANDBOXD, type BuildContext, type Part, type Variant } from './model.js';
import { monitoringParts } from './monitoring.js';
import { Param, ParamFactory, type Manifest } from './params.js';
import { DEFAULT_NAMESPACE, DEFAULT_VALUES, CHART_NAME } from './values.js';
import { apiserverObjects, operatorObjects, sandboxdObjects } from './workloads.js';

export function buildContext(variant: Variant): BuildContext {
  const p = new ParamFactory(DEFAULT_VALUES);
  return { variant, p, ns: p.namespace(DEFAULT_NAMESPACE) };
}

/**
 * The CRDs: each kind with v1alpha1 (served as `crds.serveV1alpha1` says, converted by the operator's webhook), and
 * for `crds.v1beta1Only` the same kinds with v1beta1 alone and no conversion (docs/api.md "Migrating to v1beta1").
 * Both come from buildCrd, one file each, rendered on the value; kustomize ships the default (v1alpha1 listed).
 */
function crdParts(c: BuildContext): Part[] {
  const resources = ALL_RESOURCES.filter((r) => c.variant.layout === 'crd' || r !== SandboxResource);
  const only = c.p.value('crds.v1beta1Only');
  const both = new Param(`not ${only.expr}`, !only.value);
  return resources.flatMap((r) => {
    const part = (file: string, crd: Record<string, unknown>, when?: Param): Part => ({
      file,
      objects: [decorate(c, crd as Manifest & { metadata: Manifest; spec: Manifest })],
      ...(when ? { when } : {}),
    });
    const file = `crds/${crdNameOf(r)}`;
    if (r.versions.length === 1) return [part(`${file}.yaml`, buildCrd(r))];
    return [
      part(`${file}.yaml`, buildCrd(r), both),
      part(`${file}.v1beta1-only.yaml`, buildCrd(r, { v1beta1Only: true }), only),
    ];
  });
}

function decorate(c: BuildContext, crd: Manifest & { metadata: Manifest; spec: Manifest }): Manifest {
  const conversion = crd.spec['conversion'] as { webhook: { clientConfig: { service: Manifest } } } | undefined;
  if (conversion) conversion.webhook.clientConfig.service['namespace'] = c.ns;
  for (const v of crd.spec['versions'] as Array<Manifest & { name: string }>)
    if (v.name === 'v1alpha1') v['served'] = c.p.value('crds.serveV1alpha1');
  crd.metadata['labels'] = { 'app.kubernetes.io/part-of': CHART_NAME };
  // Uninstalling must not delete every sandbox, template, pool and claim in the cluster with the CRDs. One
  // text for every variant (the CRDs are the bulk of the chart): cert-manager's CA injection is chosen by Helm.
  const keep = { 'helm.sh/resource-policy': 'keep' };
  crd.metadata['annotations'] = conversion
    ? new Param(
        `merge (dict "helm.sh/resource-policy" "keep") (ternary (dict "cert-manager.io/inject-ca-from" (printf "%s/${WEBHOOK_CERTIFICATE}" .Release.Namespace)) (dict) (and .Values.certManager.enabled (eq .Values.layout "crd")))`,
        // What kustomize's variants get: neither injects (the aggregated overlay has no webhook certificate).
        keep,
        'block',
      )
    : keep;
  return crd;
}

export function buildParts(variant: Variant): Part[] {
  const c = buildContext(variant);
  const parts: Part[] = [...crdParts(c)];
  parts.push({ file: 'sandboxd.yaml', objects: [...accessObjects(SANDBOXD, c), ...sandboxdObjects(c)] });
  if (variant.layout === 'crd') {
    parts.push({ file: 'operator.yaml', objects: [...accessObjects(OPERATOR, c), ...operatorObjects(c)] });
  } else {
    parts.push({
      file: 'apiserver.yaml',
      objects: [...accessObjects(APISERVER, c), ...userRoles(APISERVER), ...apiserverObjects(c)],
    });
    parts.push(...apiServiceParts(c));
  }
  parts.push(...certManagerParts(c));
  parts.push(...monitoringParts(c));
  return parts;
}
