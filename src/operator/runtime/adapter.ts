/**
 * The Pod-runtime adapter (docs/runtime-adapter.md): picks where a Sandbox's Pod runs —
 * `standard` (any kubelet), `vk-cocoon` (microVM virtual node) or `sandboxd` (sandboxd virtual node) — and fills
 * in only the scheduling fields the user left empty. It is applied once, when the Sandbox controller creates the
 * Pod; it never overwrites a value the user set. A conflicting explicit value is a rejection
 * ({@link RuntimeAdapterError}), which the controller reports as Ready=False `ReconcilerError`.
 *
 * Pure: no I/O, no clock, no globals. The input pod is not modified.
 */
import { createHash } from 'node:crypto';
import { CocoonAnnotationKeys } from '../../api/index.js';
import type { PodSpec } from '../../api/index.js';
import { SandboxError } from '../../errors.js';
import { RUNTIMES, type RuntimeName } from '../options.js';

export { RUNTIMES, type RuntimeName };

type Toleration = NonNullable<PodSpec['tolerations']>[number];

/** nodeSelector key/value each virtual runtime routes on. */
export const RUNTIME_NODE_SELECTOR: Record<Exclude<RuntimeName, 'standard'>, { key: string; value: string }> = {
  'vk-cocoon': { key: 'node.kubernetes.io/instance-type', value: 'virtual-node' },
  sandboxd: { key: CocoonAnnotationKeys.runtime, value: 'sandboxd' },
};

/** The taint virtual-kubelet nodes carry; virtual runtimes tolerate it. */
export const VIRTUAL_KUBELET_TOLERATION: Toleration = {
  key: 'virtual-kubelet.io/provider',
  operator: 'Exists',
  effect: 'NoSchedule',
};

export class RuntimeAdapterError extends SandboxError {
  constructor(message: string) {
    super('runtime.conflict', message, {
      hint: 'remove the conflicting field or the sandbox.cocoonstack.io/runtime annotation',
    });
    this.name = 'RuntimeAdapterError';
  }
}

/** The part of a Pod the adapter reads and writes. */
export interface AdaptablePod {
  metadata: { annotations?: Record<string, string> };
  spec: PodSpec;
}

export interface AdapterInput {
  /** The Sandbox the Pod belongs to (the stable VM name is derived from it, not from the Pod). */
  sandboxNamespace: string;
  sandboxName: string;
  /** `--default-runtime`. */
  defaultRuntime: RuntimeName;
}

export interface RuntimeSelection {
  runtime: RuntimeName;
  /** True when the Pod's annotation named it (false: runtimeClassName or the operator default). */
  explicit: boolean;
}

export function isRuntimeName(v: string): v is RuntimeName {
  return (RUNTIMES as readonly string[]).includes(v);
}

/** Order: the Pod's runtime annotation (trimmed, non-empty), else `runtimeClassName` → standard, else the default. */
export function selectRuntime(pod: AdaptablePod, defaultRuntime: RuntimeName): RuntimeSelection {
  const raw = pod.metadata.annotations?.[CocoonAnnotationKeys.runtime]?.trim();
  if (raw) {
    if (!isRuntimeName(raw))
      throw new RuntimeAdapterError(`unsupported ${CocoonAnnotationKeys.runtime} value "${raw}"`);
    return { runtime: raw, explicit: true };
  }
  if (pod.spec.runtimeClassName) return { runtime: 'standard', explicit: false };
  return { runtime: defaultRuntime, explicit: false };
}

/**
 * The VM name a vk-cocoon node gives this Sandbox: `sandbox-<ns>-<name>` lower-cased, every run outside
 * `[a-z0-9]` collapsed to `-`, trimmed, at most 54 chars, then `-` + the first 8 hex of sha256(`<ns>/<name>`).
 */
export function stableVmName(namespace: string, name: string): string {
  let base = `sandbox-${namespace}-${name}`
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '');
  if (!base) base = 'sandbox';
  base = base.slice(0, 54).replace(/-+$/g, '');
  const digest = createHash('sha256').update(`${namespace}/${name}`).digest('hex').slice(0, 8);
  return `${base}-${digest}`;
}

/**
 * Returns the Pod with its runtime applied (a copy; `standard` returns the same object unchanged).
 * Throws {@link RuntimeAdapterError} on a conflict. Idempotent: adapting an adapted Pod changes nothing.
 */
export function adaptPodForRuntime<P extends AdaptablePod>(pod: P, input: AdapterInput): P {
  const { runtime, explicit } = selectRuntime(pod, input.defaultRuntime);
  if (runtime === 'standard') return pod;
  const spec = pod.spec;
  if (spec.runtimeClassName && explicit) {
    throw new RuntimeAdapterError(`${CocoonAnnotationKeys.runtime}=${runtime} conflicts with spec.runtimeClassName`);
  }
  if (spec.nodeName)
    throw new RuntimeAdapterError(
      `${CocoonAnnotationKeys.runtime}=${runtime} conflicts with spec.nodeName=${spec.nodeName}`,
    );
  const route = RUNTIME_NODE_SELECTOR[runtime];
  const existing = spec.nodeSelector?.[route.key];
  if (existing !== undefined && existing !== route.value) {
    throw new RuntimeAdapterError(
      `node selector ${route.key}=${existing} conflicts with ${runtime} value ${route.value}`,
    );
  }

  const tolerations = [...(spec.tolerations ?? [])];
  const tolerated = tolerations.some(
    (t) =>
      t.key === VIRTUAL_KUBELET_TOLERATION.key && t.operator === 'Exists' && (!t.effect || t.effect === 'NoSchedule'),
  );
  if (!tolerated) tolerations.push({ ...VIRTUAL_KUBELET_TOLERATION });

  const image = spec.containers[0]?.image ?? '';
  const wanted: Array<[string, string]> =
    runtime === 'vk-cocoon'
      ? [
          [CocoonAnnotationKeys.runtime, 'vk-cocoon'],
          [CocoonAnnotationKeys.cocoonsetMode, 'run'],
          [CocoonAnnotationKeys.cocoonsetManaged, 'true'],
          [CocoonAnnotationKeys.vmName, stableVmName(input.sandboxNamespace, input.sandboxName)],
          [CocoonAnnotationKeys.cocoonsetImage, image],
          [CocoonAnnotationKeys.cocoonsetOs, (spec.os?.name || 'linux').toLowerCase()],
        ]
      : [
          [CocoonAnnotationKeys.runtime, 'sandboxd'],
          [CocoonAnnotationKeys.template, image],
        ];
  const annotations = { ...(pod.metadata.annotations ?? {}) };
  for (const [k, v] of wanted) if (annotations[k] === undefined && v !== '') annotations[k] = v;

  return {
    ...pod,
    metadata: { ...pod.metadata, annotations },
    spec: { ...spec, nodeSelector: { ...(spec.nodeSelector ?? {}), [route.key]: route.value }, tolerations },
  };
}
