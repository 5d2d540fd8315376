/**
 * Sandbox v1alpha1 <-> v1beta1 (docs/api.md "The core mapping per kind"): `replicas` 0/1 is `operatingMode`
 * Suspended/Running.
 *
 * The v1alpha1-state annotation `{"spec":{"replicas":N},"status":{"replicas":M}}` (a key present iff the value
 * is set) is written only when the v1alpha1 replicas are not what the hub fields imply (spec.replicas unset,
 * or a status.replicas other than 0/1 by mode), so objects written through v1alpha1 usually carry none.
 * Reading it also takes the upstream's values holding a whole v1alpha1 object.
 */
import { ConversionKeys } from '../keys.js';
import type { Sandbox, SandboxStatus, SandboxStatusV1alpha1, SandboxV1alpha1 } from '../sandbox.js';
import { ConversionError } from './errors.js';
import { annotation, editAnnotations, isPlainObject, put } from './object-edit.js';
import { envelope, exactRoundTrip, type Conversion } from './round-trip.js';
import { apiVersionOf, HUB_VERSION, SandboxResource, SPOKE_VERSION } from '../scheme.js';

const HUB_API_VERSION = apiVersionOf(SandboxResource, HUB_VERSION);
const SPOKE_API_VERSION = apiVersionOf(SandboxResource, SPOKE_VERSION);

const STATE = ConversionKeys.sandboxV1alpha1State;
const HUB_STATE = ConversionKeys.sandboxV1beta1State;

interface AlphaReplicas {
  spec: number | undefined;
  status: number | undefined;
}

function readState(raw: string): AlphaReplicas {
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch (err) {
    throw new ConversionError(`invalid ${STATE} annotation: ${(err as Error).message}`, { cause: err });
  }
  const replicasAt = (section: string): number | undefined => {
    const sub = isPlainObject(parsed) ? parsed[section] : undefined;
    const v = isPlainObject(sub) ? sub['replicas'] : undefined;
    if (v === undefined || v === null) return undefined;
    if (typeof v !== 'number' || !Number.isInteger(v)) {
      throw new ConversionError(`invalid ${STATE} annotation: ${section}.replicas is not an integer`);
    }
    return v;
  };
  return { spec: replicasAt('spec'), status: replicasAt('status') };
}

/** What the v1alpha1 replicas are for a hub object (state annotation applied when present). */
function alphaReplicas(hub: Sandbox): AlphaReplicas {
  const suspended = hub.spec.operatingMode === 'Suspended';
  const raw = annotation(hub.metadata, STATE);
  if (raw === undefined) {
    return { spec: suspended ? 0 : 1, status: hub.status === undefined ? undefined : suspended ? 0 : 1 };
  }
  const state = readState(raw);
  return {
    spec: suspended ? 0 : state.spec === undefined || state.spec !== 0 ? state.spec : 1,
    status: state.status,
  };
}

function hubToSpoke(hub: Sandbox): SandboxV1alpha1 {
  const s = hub.spec;
  const replicas = alphaReplicas(hub);
  const spec: SandboxV1alpha1['spec'] = { podTemplate: s.podTemplate };
  put(spec, 'volumeClaimTemplates', s.volumeClaimTemplates);
  put(spec, 'shutdownTime', s.shutdownTime);
  put(spec, 'shutdownPolicy', s.shutdownPolicy);
  put(spec, 'replicas', replicas.spec);
  put(spec, 'service', s.service);
  const out: SandboxV1alpha1 = { ...envelope(hub, SPOKE_API_VERSION, [STATE, HUB_STATE]), spec };
  if (hub.status !== undefined || replicas.status !== undefined) {
    const st = hub.status ?? {};
    const status: SandboxStatusV1alpha1 = {};
    put(status, 'serviceFQDN', st.serviceFQDN);
    put(status, 'service', st.service);
    put(status, 'conditions', st.conditions);
    put(status, 'replicas', replicas.status);
    put(status, 'selector', st.selector);
    put(status, 'podIPs', st.podIPs);
    out.status = status;
  }
  return out;
}

function spokeToHub(spoke: SandboxV1alpha1): Sandbox {
  const s = spoke.spec;
  const spec: Sandbox['spec'] = { podTemplate: s.podTemplate };
  put(spec, 'volumeClaimTemplates', s.volumeClaimTemplates);
  put(spec, 'service', s.service);
  put(spec, 'shutdownTime', s.shutdownTime);
  put(spec, 'shutdownPolicy', s.shutdownPolicy);
  spec.operatingMode = s.replicas === 0 ? 'Suspended' : 'Running';
  const hub: Sandbox = { ...envelope(spoke, HUB_API_VERSION, [STATE, HUB_STATE]), spec };
  if (spoke.status !== undefined) {
    const st = spoke.status;
    const status: SandboxStatus = {};
    put(status, 'serviceFQDN', st.serviceFQDN);
    put(status, 'service', st.service);
    put(status, 'conditions', st.conditions);
    put(status, 'selector', st.selector);
    put(status, 'podIPs', st.podIPs);
    hub.status = status;
  }
  const implied = alphaReplicas(hub);
  const actual: AlphaReplicas = { spec: s.replicas, status: spoke.status?.replicas };
  if (implied.spec !== actual.spec || implied.status !== actual.status) {
    const state = JSON.stringify({
      spec: actual.spec === undefined ? {} : { replicas: actual.spec },
      status: actual.status === undefined ? {} : { replicas: actual.status },
    });
    hub.metadata = editAnnotations(hub.metadata, [], { [STATE]: state });
  }
  return hub;
}

export const sandboxConversion: Conversion<Sandbox, SandboxV1alpha1> = exactRoundTrip({
  hubStateKey: HUB_STATE,
  hubToSpoke,
  spokeToHub,
});
