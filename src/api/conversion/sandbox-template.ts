/**
 * SandboxTemplate v1alpha1 <-> v1beta1 (docs/api.md "The core mapping per kind"). v1alpha1 lacks
 * `volumeClaimTemplatesPolicy`; it travels in the `v1beta1-volume-claim-templates-policy` annotation of the v1alpha1
 * view. v1alpha1 holds nothing v1beta1 cannot, so no v1alpha1-state annotation is written (the upstream's copy was
 * never read back); one found on a hub object is kept through round trips by the generic v1beta1-state patch.
 */
import { ConversionKeys } from '../keys.js';
import { apiVersionOf, HUB_VERSION, SandboxTemplateResource, SPOKE_VERSION } from '../scheme.js';
import {
  VOLUME_CLAIM_TEMPLATES_POLICIES,
  type SandboxTemplate,
  type SandboxTemplateSpecV1alpha1,
  type SandboxTemplateV1alpha1,
  type VolumeClaimTemplatesPolicy,
} from '../sandbox-template.js';
import { ConversionError } from './errors.js';
import { annotation, editAnnotations, put } from './object-edit.js';
import { envelope, exactRoundTrip, type Conversion } from './round-trip.js';

const STATE = ConversionKeys.sandboxTemplateV1alpha1State;
const HUB_STATE = ConversionKeys.sandboxTemplateV1beta1State;
const POLICY = ConversionKeys.volumeClaimTemplatesPolicy;
const HUB_API_VERSION = apiVersionOf(SandboxTemplateResource, HUB_VERSION);
const SPOKE_API_VERSION = apiVersionOf(SandboxTemplateResource, SPOKE_VERSION);

function commonSpec(s: SandboxTemplateSpecV1alpha1): SandboxTemplateSpecV1alpha1 {
  const spec: SandboxTemplateSpecV1alpha1 = { podTemplate: s.podTemplate };
  put(spec, 'volumeClaimTemplates', s.volumeClaimTemplates);
  put(spec, 'service', s.service);
  put(spec, 'networkPolicy', s.networkPolicy);
  put(spec, 'networkPolicyManagement', s.networkPolicyManagement);
  put(spec, 'envVarsInjectionPolicy', s.envVarsInjectionPolicy);
  return spec;
}

function hubToSpoke(hub: SandboxTemplate): SandboxTemplateV1alpha1 {
  const out: SandboxTemplateV1alpha1 = {
    ...envelope(hub, SPOKE_API_VERSION, [STATE, HUB_STATE, POLICY]),
    spec: commonSpec(hub.spec),
  };
  const policy = hub.spec.volumeClaimTemplatesPolicy;
  if (policy !== undefined && policy !== ('' as VolumeClaimTemplatesPolicy)) {
    out.metadata = editAnnotations(out.metadata, [], { [POLICY]: policy });
  }
  return out;
}

function spokeToHub(spoke: SandboxTemplateV1alpha1): SandboxTemplate {
  const hub: SandboxTemplate = {
    ...envelope(spoke, HUB_API_VERSION, [STATE, HUB_STATE, POLICY]),
    spec: commonSpec(spoke.spec),
  };
  const policy = annotation(spoke.metadata, POLICY);
  if (policy !== undefined) {
    if (!(VOLUME_CLAIM_TEMPLATES_POLICIES as readonly string[]).includes(policy)) {
      throw new ConversionError(`invalid VolumeClaimTemplatesPolicy annotation value: ${JSON.stringify(policy)}`);
    }
    hub.spec.volumeClaimTemplatesPolicy = policy as VolumeClaimTemplatesPolicy;
  }
  return hub;
}

export const sandboxTemplateConversion: Conversion<SandboxTemplate, SandboxTemplateV1alpha1> = exactRoundTrip({
  hubStateKey: HUB_STATE,
  hubToSpoke,
  spokeToHub,
});
