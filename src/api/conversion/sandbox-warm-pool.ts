/**
 * SandboxWarmPool v1alpha1 <-> v1beta1 (docs/api.md "The core mapping per kind"). `spec.replicas` is required in
 * v1alpha1 and optional (default 1) in v1beta1. The v1alpha1-state annotation is written only for a v1alpha1 object
 * without replicas (`{"spec":{}}`), the one thing v1beta1 cannot say; `status.observedGeneration` (v1beta1 only) is
 * kept by the generic v1beta1-state patch.
 */
import { ConversionKeys } from '../keys.js';
import { apiVersionOf, HUB_VERSION, SandboxWarmPoolResource, SPOKE_VERSION } from '../scheme.js';
import type {
  SandboxWarmPool,
  SandboxWarmPoolStatus,
  SandboxWarmPoolStatusV1alpha1,
  SandboxWarmPoolV1alpha1,
} from '../sandbox-warm-pool.js';
import { ConversionError } from './errors.js';
import { annotation, editAnnotations, isPlainObject, put } from './object-edit.js';
import { envelope, exactRoundTrip, type Conversion } from './round-trip.js';

const STATE = ConversionKeys.sandboxWarmPoolV1alpha1State;
const HUB_STATE = ConversionKeys.sandboxWarmPoolV1beta1State;
const HUB_API_VERSION = apiVersionOf(SandboxWarmPoolResource, HUB_VERSION);
const SPOKE_API_VERSION = apiVersionOf(SandboxWarmPoolResource, SPOKE_VERSION);

function alphaReplicas(hub: SandboxWarmPool): number | undefined {
  if (hub.spec.replicas !== undefined) return hub.spec.replicas;
  const raw = annotation(hub.metadata, STATE);
  if (raw === undefined) return 1;
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch (err) {
    throw new ConversionError(`invalid ${STATE} annotation: ${(err as Error).message}`, { cause: err });
  }
  const spec = isPlainObject(parsed) ? parsed['spec'] : undefined;
  const replicas = isPlainObject(spec) ? spec['replicas'] : undefined;
  return typeof replicas === 'number' ? replicas : undefined;
}

function hubToSpoke(hub: SandboxWarmPool): SandboxWarmPoolV1alpha1 {
  const spec = { sandboxTemplateRef: hub.spec.sandboxTemplateRef } as SandboxWarmPoolV1alpha1['spec'];
  put(spec, 'replicas', alphaReplicas(hub));
  put(spec, 'updateStrategy', hub.spec.updateStrategy);
  const out: SandboxWarmPoolV1alpha1 = { ...envelope(hub, SPOKE_API_VERSION, [STATE, HUB_STATE]), spec };
  if (hub.status !== undefined) {
    const status: SandboxWarmPoolStatusV1alpha1 = {};
    put(status, 'replicas', hub.status.replicas);
    put(status, 'readyReplicas', hub.status.readyReplicas);
    put(status, 'selector', hub.status.selector);
    out.status = status;
  }
  return out;
}

function spokeToHub(spoke: SandboxWarmPoolV1alpha1): SandboxWarmPool {
  const spec: SandboxWarmPool['spec'] = { sandboxTemplateRef: spoke.spec.sandboxTemplateRef };
  put(spec, 'replicas', spoke.spec.replicas);
  put(spec, 'updateStrategy', spoke.spec.updateStrategy);
  const hub: SandboxWarmPool = { ...envelope(spoke, HUB_API_VERSION, [STATE, HUB_STATE]), spec };
  if (spoke.status !== undefined) {
    const status: SandboxWarmPoolStatus = {};
    put(status, 'replicas', spoke.status.replicas);
    put(status, 'readyReplicas', spoke.status.readyReplicas);
    put(status, 'selector', spoke.status.selector);
    hub.status = status;
  }
  if (spoke.spec.replicas === undefined) hub.metadata = editAnnotations(hub.metadata, [], { [STATE]: '{"spec":{}}' });
  return hub;
}

export const sandboxWarmPoolConversion: Conversion<SandboxWarmPool, SandboxWarmPoolV1alpha1> = exactRoundTrip({
  hubStateKey: HUB_STATE,
  hubToSpoke,
  spokeToHub,
});
