/**
 * Desired state of a Sandbox's children (docs/operator.md "What a reconcile does", docs/api.md "Well-known keys"):
 * names, labels, annotations, the Pod built at creation, the metadata re-synced onto an existing Pod, the headless
 * Service and the PVCs. Pure functions of the Sandbox (and the existing child where one exists): no I/O, no clock.
 */
import {
  AnnotationKeys,
  API_VERSION,
  EXTENSIONS_GROUP,
  fnv1a32,
  isSystemKey,
  LabelKeys,
  type PersistentVolumeClaimTemplate,
  type PodSpec,
  type Volume,
} from '../../api/index.js';
import { controllerOf, mergePatch, refGroup, type OwnerReference } from '../../kube/index.js';
import { adaptPodForRuntime, type RuntimeName } from '../runtime/adapter.js';
import type { PersistentVolumeClaim, Pod, SandboxObject, Service, ServicePort } from './types.js';

/** hash(sandbox name): the value of `agents.x-k8s.io/sandbox-name-hash`. */
export const nameHashOf = (sandboxName: string): string => fnv1a32(sandboxName);

/** `status.selector`: `agents.x-k8s.io/sandbox-name-hash=<hash(name)>`. */
export const selectorOf = (sandboxName: string): string => `${LabelKeys.sandboxNameHash}=${nameHashOf(sandboxName)}`;

/** The Pod name: the `agents.x-k8s.io/pod-name` annotation when non-empty, else the Sandbox name. */
export function podNameOf(sb: SandboxObject): string {
  return sb.metadata.annotations?.[AnnotationKeys.podName] || (sb.metadata.name ?? '');
}

/** `<vct name>-<sandbox name>`. */
export const pvcNameOf = (vct: PersistentVolumeClaimTemplate, sandboxName: string): string =>
  `${vct.metadata?.name ?? ''}-${sandboxName}`;

/** The controller ownerReference every child gets: controller + blockOwnerDeletion → the Sandbox (v1beta1). */
export function sandboxOwnerRef(sb: SandboxObject): OwnerReference {
  return {
    apiVersion: API_VERSION.Sandbox,
    kind: 'Sandbox',
    name: sb.metadata.name ?? '',
    uid: sb.metadata.uid ?? '',
    controller: true,
    blockOwnerDeletion: true,
  };
}

const CREATED_BY_VALUES = new Set(['go-client', 'python-client', 'controller', 'loadgen']);

/** `agents.x-k8s.io/created-by` on Pods is normalized to a closed set. */
export function normalizeCreatedBy(value: string): string {
  return CREATED_BY_VALUES.has(value) ? value : 'unknown';
}

/**
 * Labels the controller forces onto the Pod from the Sandbox itself (not from the pod template): the name hash,
 * the template-ref hash while an extensions kind controls the Sandbox, the warm-pool label while a
 * SandboxWarmPool does, and the normalized created-by. A key mapped to undefined must be absent.
 */
export function controllerPodLabels(sb: SandboxObject): Record<string, string | undefined> {
  const sbLabels = sb.metadata.labels ?? {};
  const owner = controllerOf(sb);
  const byExtension = !!owner && refGroup(owner) === EXTENSIONS_GROUP;
  const createdBy = sbLabels[LabelKeys.createdBy];
  return {
    [LabelKeys.sandboxNameHash]: nameHashOf(sb.metadata.name ?? ''),
    [LabelKeys.sandboxTemplateRefHash]: byExtension ? sbLabels[LabelKeys.sandboxTemplateRefHash] : undefined,
    [LabelKeys.warmPoolSandbox]:
      byExtension && owner.kind === 'SandboxWarmPool' ? sbLabels[LabelKeys.warmPoolSandbox] : undefined,
    [LabelKeys.createdBy]: createdBy ? normalizeCreatedBy(createdBy) : undefined,
  };
}

/** Pod-template keys that propagate (system-reserved keys never do), sorted. */
function userEntries(map: Record<string, string> | undefined): Array<[string, string]> {
  return Object.entries(map ?? {})
    .filter(([k]) => !isSystemKey(k))
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

/** Labels and annotations of a Pod the controller is about to create. */
export function podMetadataForCreate(sb: SandboxObject): {
  labels: Record<string, string>;
  annotations: Record<string, string>;
} {
  const pt = sb.spec.podTemplate.metadata;
  const userLabels = userEntries(pt?.labels);
  const userAnnotations = userEntries(pt?.annotations);
  const labels: Record<string, string> = Object.fromEntries(userLabels);
  for (const [k, v] of Object.entries(controllerPodLabels(sb))) if (v !== undefined) labels[k] = v;
  const annotations: Record<string, string> = Object.fromEntries(userAnnotations);
  if (userLabels.length) annotations[AnnotationKeys.propagatedLabels] = userLabels.map(([k]) => k).join(',');
  if (userAnnotations.length)
    annotations[AnnotationKeys.propagatedAnnotations] = userAnnotations.map(([k]) => k).join(',');
  return { labels, annotations };
}

const splitKeys = (v: string | undefined): string[] => (v ? v.split(',').filter(Boolean) : []);

const KEEP_WHEN_LISTED = new Set<string>([
  LabelKeys.sandboxNameHash,
  AnnotationKeys.propagatedLabels,
  AnnotationKeys.propagatedAnnotations,
]);

/**
 * The labels and annotations an existing Pod should carry (every pass): pod-template keys upserted, keys this
 * controller propagated earlier but the template no longer has removed (system keys recorded by an older
 * version are scrubbed), the controller labels forced or removed, the propagated-* records rewritten. Keys
 * nobody propagated (set by others) are left alone. Returns new maps; the pod is not modified.
 */
export function syncedPodMetadata(
  pod: Pod,
  sb: SandboxObject,
): { labels: Record<string, string>; annotations: Record<string, string> } {
  const labels = { ...(pod.metadata.labels ?? {}) };
  const annotations = { ...(pod.metadata.annotations ?? {}) };
  const pt = sb.spec.podTemplate.metadata;
  const userLabels = userEntries(pt?.labels);
  const userAnnotations = userEntries(pt?.annotations);

  const prune = (target: Record<string, string>, recorded: string | undefined, wanted: Array<[string, string]>) => {
    const keep = new Set(wanted.map(([k]) => k));
    for (const k of splitKeys(recorded)) if (!keep.has(k) && !KEEP_WHEN_LISTED.has(k)) delete target[k];
  };
  prune(labels, annotations[AnnotationKeys.propagatedLabels], userLabels);
  prune(annotations, annotations[AnnotationKeys.propagatedAnnotations], userAnnotations);
  for (const [k, v] of userLabels) labels[k] = v;
  for (const [k, v] of userAnnotations) annotations[k] = v;
  for (const [k, v] of Object.entries(controllerPodLabels(sb))) {
    if (v === undefined) delete labels[k];
    else labels[k] = v;
  }
  const record = (key: string, entries: Array<[string, string]>) => {
    const joined = entries.map(([k]) => k).join(',');
    // Written when there is something to record, or rewritten (possibly to "") once it exists.
    if (joined || key in annotations) annotations[key] = joined;
  };
  record(AnnotationKeys.propagatedLabels, userLabels);
  record(AnnotationKeys.propagatedAnnotations, userAnnotations);
  return { labels, annotations };
}

/** The pod template spec with one PVC volume per volumeClaimTemplate (same-named template volumes replaced). */
export function podSpecWithClaims(sb: SandboxObject): PodSpec {
  const spec = structuredClone(sb.spec.podTemplate.spec);
  const vcts = sb.spec.volumeClaimTemplates ?? [];
  if (!vcts.length) return spec;
  const claimVolumes: Volume[] = vcts.map((vct) => ({
    name: vct.metadata?.name ?? '',
    persistentVolumeClaim: { claimName: pvcNameOf(vct, sb.metadata.name ?? '') },
  }));
  const names = new Set(claimVolumes.map((v) => v.name));
  spec.volumes = [...(spec.volumes ?? []).filter((v) => !names.has(v.name)), ...claimVolumes];
  return spec;
}

/**
 * The Pod to create for a Sandbox: template spec + claim volumes, propagated metadata, runtime adapter applied,
 * controller reference. Throws the adapter's error on a runtime conflict.
 */
export function buildPod(sb: SandboxObject, podName: string, defaultRuntime: RuntimeName): Pod {
  const { labels, annotations } = podMetadataForCreate(sb);
  const pod: Pod = {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: podName,
      namespace: sb.metadata.namespace,
      labels,
      annotations,
      ownerReferences: [sandboxOwnerRef(sb)],
    },
    spec: podSpecWithClaims(sb),
  };
  return adaptPodForRuntime(pod, {
    sandboxNamespace: sb.metadata.namespace ?? '',
    sandboxName: sb.metadata.name ?? '',
    defaultRuntime,
  });
}

/** A PVC for one volumeClaimTemplate. */
export function buildPvc(sb: SandboxObject, vct: PersistentVolumeClaimTemplate): PersistentVolumeClaim {
  const name = sb.metadata.name ?? '';
  return {
    apiVersion: 'v1',
    kind: 'PersistentVolumeClaim',
    metadata: {
      name: pvcNameOf(vct, name),
      namespace: sb.metadata.namespace,
      labels: { ...(vct.metadata?.labels ?? {}), [LabelKeys.sandboxNameHash]: nameHashOf(name) },
      ...(vct.metadata?.annotations ? { annotations: { ...vct.metadata.annotations } } : {}),
      ownerReferences: [sandboxOwnerRef(sb)],
    },
    spec: structuredClone(vct.spec),
  };
}

/**
 * Service ports derived from the pod template (newer upstream): every container port plus those of restartable
 * init containers (sidecars), deduplicated by (port, protocol), sorted, named by the first explicit container port
 * name else `p-<port>-<protocol>`, clashing names suffixed `-2`, `-3`…; targetPort = port.
 */
export function servicePortsOf(spec: PodSpec): ServicePort[] {
  const containers = [...spec.containers, ...(spec.initContainers ?? []).filter((c) => c.restartPolicy === 'Always')];
  const byKey = new Map<string, { port: number; protocol: string; name: string | undefined }>();
  for (const c of containers)
    for (const p of c.ports ?? []) {
      const protocol = p.protocol || 'TCP';
      const key = `${p.containerPort}/${protocol}`;
      const seen = byKey.get(key);
      if (!seen) byKey.set(key, { port: p.containerPort, protocol, name: p.name || undefined });
      else if (!seen.name && p.name) seen.name = p.name;
    }
  const sorted = [...byKey.values()].sort(
    (a, b) => a.port - b.port || (a.protocol < b.protocol ? -1 : a.protocol > b.protocol ? 1 : 0),
  );
  const used = new Set<string>();
  return sorted.map(({ port, protocol, name }) => {
    const base = name ?? `p-${port}-${protocol.toLowerCase()}`;
    let unique = base;
    for (let n = 2; used.has(unique); n++) unique = `${base}-${n}`;
    used.add(unique);
    return { name: unique, port, protocol, targetPort: port };
  });
}

/** The headless Service `<sandbox>`: selector and label `{sandbox-name-hash: h}`, clusterIP None, derived ports. */
export function buildService(sb: SandboxObject): Service {
  const name = sb.metadata.name ?? '';
  const h = nameHashOf(name);
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: {
      name,
      namespace: sb.metadata.namespace,
      labels: { [LabelKeys.sandboxNameHash]: h },
      ownerReferences: [sandboxOwnerRef(sb)],
    },
    spec: {
      clusterIP: 'None',
      selector: { [LabelKeys.sandboxNameHash]: h },
      ports: servicePortsOf(sb.spec.podTemplate.spec),
    },
  };
}

/**
 * What an owned Service should look like after drift repair: the name-hash label and selector forced; the ports
 * too when `spec.service` is true. Returns the fields to compare (labels, selector, ports).
 */
export function repairedService(
  svc: Service,
  sb: SandboxObject,
): { labels: Record<string, string>; selector: Record<string, string>; ports: ServicePort[] | undefined } {
  const h = nameHashOf(sb.metadata.name ?? '');
  const ports =
    sb.spec.service === true
      ? mergePortDefaults(servicePortsOf(sb.spec.podTemplate.spec), svc.spec.ports ?? [])
      : svc.spec.ports;
  return {
    labels: { ...(svc.metadata.labels ?? {}), [LabelKeys.sandboxNameHash]: h },
    selector: { [LabelKeys.sandboxNameHash]: h },
    ports,
  };
}

/**
 * The merge patch that repairs an owned Service's drift, or undefined when it has none. No ports and an empty list
 * are the same: the apiserver omits an empty `ports`, so a headless Service of a pod template without ports reads
 * back without the field, and comparing `undefined` with `[]` sent a no-op PATCH on every pass.
 */
export function serviceRepairPatch(svc: Service, sb: SandboxObject): unknown {
  const want = repairedService(svc, sb);
  return mergePatch(
    {
      metadata: { labels: svc.metadata.labels ?? {} },
      spec: { selector: svc.spec.selector ?? {}, ports: svc.spec.ports ?? [] },
    },
    { metadata: { labels: want.labels }, spec: { selector: want.selector, ports: want.ports ?? [] } },
  );
}

/**
 * The apiserver fills fields we do not set (e.g. appProtocol stays unset, but nodePort/targetPort types may
 * differ); compare only what we own, keeping server-side extras of a port whose identity matches.
 */
function mergePortDefaults(wanted: ServicePort[], existing: ServicePort[]): ServicePort[] {
  return wanted.map((w) => {
    const e = existing.find((x) => x.port === w.port && (x.protocol ?? 'TCP') === w.protocol && x.name === w.name);
    return e && e.targetPort === w.targetPort ? e : w;
  });
}

/** True when the unowned object may be adopted: `adoptable=true` or a matching name-hash label. */
export function isAdoptable(labels: Record<string, string> | undefined, sandboxName: string): boolean {
  return labels?.[LabelKeys.adoptable] === 'true' || labels?.[LabelKeys.sandboxNameHash] === nameHashOf(sandboxName);
}

export const ADOPTION_REQUIREMENT = `missing required pool authorization label ("${LabelKeys.adoptable}") or sandbox tracking label ("${LabelKeys.sandboxNameHash}")`;

/** `<what> "<n>" is owned by <Kind>/<name> (UID: <uid>), not by sandbox "<sb>"`. */
export function foreignOwnerMessage(what: string, name: string, ref: OwnerReference, sandboxName: string): string {
  return `${what} "${name}" is owned by ${ref.kind}/${ref.name} (UID: ${ref.uid}), not by sandbox "${sandboxName}"`;
}

export function cannotAdoptMessage(what: string, name: string): string {
  return `cannot adopt unowned ${what} "${name}": ${ADOPTION_REQUIREMENT}`;
}
