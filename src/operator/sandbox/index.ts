/**
 * The Sandbox controller: `For` Sandbox (v1beta1), `Owns` Pod, Service and PVC — each cached through an informer
 * filtered to objects carrying the `agents.x-k8s.io/sandbox-name-hash` label key.
 */
import { AnnotationKeys, LabelKeys, parseApiVersion, EXTENSIONS_GROUP, AGENTS_GROUP } from '../../api/index.js';
import { controllerOf, PersistentVolumeClaims, Pods, Sandboxes, Services, type Manager } from '../../kube/index.js';
import { registerController } from '../build.js';
import { operatorEventRecorder } from '../events.js';
import { foregroundOf } from '../foreground.js';
import { sandboxCreationLatency, sandboxesGauge, type SandboxesGaugeLabels } from '../metrics.js';
import type { OperatorConfig } from '../options.js';
import { ConditionTypes, findCondition, ReadyReasons } from './conditions.js';
import { POD_OWNER_INDEX } from './pod-reconciler.js';
import { SandboxReconciler } from './reconciler.js';
import type { PersistentVolumeClaim, Pod, SandboxObject, Service } from './types.js';

export { SandboxReconciler } from './reconciler.js';
export { POD_OWNER_INDEX } from './pod-reconciler.js';
export * from './conditions.js';
export * from './desired.js';
export type * from './types.js';

export const SANDBOX_CONTROLLER_NAME = 'sandbox';

/** Label selector of the child informers: the name-hash key exists. */
export const CHILD_SELECTOR = LabelKeys.sandboxNameHash;

/** Wire the Sandbox controller into a manager (informers, indexes, watches, metrics). */
export function setupSandboxController(manager: Manager, config: OperatorConfig): SandboxReconciler {
  const namespace = config.watchNamespace;
  const sandboxes = manager.informer<SandboxObject>(Sandboxes, { namespace });
  const pods = manager.informer<Pod>(Pods, { namespace, labelSelector: CHILD_SELECTOR });
  const services = manager.informer<Service>(Services, { namespace, labelSelector: CHILD_SELECTOR });
  const pvcs = manager.informer<PersistentVolumeClaim>(PersistentVolumeClaims, {
    namespace,
    labelSelector: CHILD_SELECTOR,
  });
  pods.addIndex(POD_OWNER_INDEX, (p) => {
    const ref = controllerOf(p);
    return ref && ref.kind === 'Sandbox' && parseApiVersion(ref.apiVersion).group === AGENTS_GROUP ? [ref.uid] : [];
  });

  const latency = sandboxCreationLatency(manager.registry);
  const foreground = foregroundOf(manager);
  const reconciler = new SandboxReconciler({
    client: manager.client,
    sandboxes,
    pods,
    services,
    pvcs,
    defaultRuntime: config.defaultRuntime,
    clusterDomain: config.clusterDomain,
    events: config.disableSandboxEvents
      ? undefined
      : operatorEventRecorder(manager.client, manager.log, manager.registry),
    onReady: (sb, ms) => latency.observe(creationLatencyLabels(sb), ms),
    hold: (uid) => foreground.hold(`sandbox:${uid}`),
  });
  pods.addHandler({ onDelete: (p) => reconciler.podDeleted(p) });
  sandboxes.addHandler({
    onDelete: (sb) => {
      reconciler.sandboxDeleted(sb);
      foreground.release(`sandbox:${sb.metadata.uid}`);
    },
  });
  sandboxesGauge(manager.registry, () => sandboxes.list().map(gaugeLabels));

  // Unowned pods carrying the label are mapped to the Sandbox of the same name (adoption, PodNotOwned recovery).
  const unownedToSameName = (obj: Pod | Service) =>
    controllerOf(obj) ? [] : obj.metadata.namespace ? [`${obj.metadata.namespace}/${obj.metadata.name}`] : [];

  manager
    .controller({ name: SANDBOX_CONTROLLER_NAME, workers: config.sandboxWorkers, reconcile: reconciler.reconcile })
    .for(sandboxes)
    .owns(pods, 'Sandbox', AGENTS_GROUP)
    .owns(services, 'Sandbox', AGENTS_GROUP)
    .owns(pvcs, 'Sandbox', AGENTS_GROUP)
    .watches(pods, unownedToSameName)
    .watches(services, unownedToSameName);
  return reconciler;
}

function creationLatencyLabels(sb: SandboxObject) {
  return {
    namespace: sb.metadata.namespace ?? '',
    launch_type: sb.metadata.labels?.[LabelKeys.launchType] || 'unknown',
    sandbox_template: sb.metadata.annotations?.[AnnotationKeys.sandboxTemplateRef] || 'unknown',
  };
}

/** One `agent_sandboxes` row per cached Sandbox (docs/operator.md "Metrics"). */
export function gaugeLabels(sb: SandboxObject): SandboxesGaugeLabels {
  const ready = findCondition(sb.status?.conditions, ConditionTypes.ready);
  const owner = controllerOf(sb);
  const ownedBy =
    owner &&
    owner.apiVersion === `${EXTENSIONS_GROUP}/v1beta1` &&
    (owner.kind === 'SandboxClaim' || owner.kind === 'SandboxWarmPool')
      ? owner.kind
      : 'None';
  const createdBy = sb.metadata.labels?.[LabelKeys.createdBy] ?? '';
  return {
    namespace: sb.metadata.namespace ?? '',
    ready_condition: ready?.status === 'True' ? 'true' : 'false',
    expired: ready?.reason === ReadyReasons.expired ? 'true' : 'false',
    launch_type: sb.metadata.labels?.[LabelKeys.launchType] === 'warm' ? 'warm' : 'cold',
    sandbox_template: sb.metadata.annotations?.[AnnotationKeys.sandboxTemplateRef] || 'unknown',
    owned_by: ownedBy,
    created_by: ['go-client', 'python-client', 'controller', 'loadgen'].includes(createdBy) ? createdBy : 'unknown',
  };
}

registerController(SANDBOX_CONTROLLER_NAME, false, ({ manager, config }) => {
  setupSandboxController(manager, config);
});
