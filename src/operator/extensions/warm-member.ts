/**
 * A warm pool member as the pool creates it (docs/extensions.md "Warm pool"). The pool names it itself, as `generateName` would
 * (`<pool>-` and five characters of the apiserver's alphabet), so the member carries its `pod-name` annotation from
 * the start: otherwise the Sandbox controller patches it in after creating the Pod, one more write per refill.
 */
import { randomInt } from 'node:crypto';
import { AnnotationKeys, fnv1a32, LabelKeys, type Sandbox } from '../../api/index.js';
import { controllerRef, Sandboxes, SandboxWarmPools } from '../../kube/index.js';
import { sandboxSpecFromTemplate } from './blueprint.js';
import { poolHash } from './pool-members.js';
import type { PoolObj, TemplateObj } from './support.js';

/** k8s.io/apimachinery/pkg/util/rand: no vowels (no words), no 0, 1, 3 (no look-alikes). */
const NAME_ALPHABET = 'bcdfghjklmnpqrstvwxz2456789';
/** generateName keeps at most 58 characters of the prefix (63 minus the suffix). */
const MAX_PREFIX = 58;

/** `<pool>-xxxxx`, as the apiserver's generateName builds it. */
export function memberName(poolName: string): string {
  let suffix = '';
  for (let i = 0; i < 5; i++) suffix += NAME_ALPHABET[randomInt(NAME_ALPHABET.length)];
  return `${`${poolName}-`.slice(0, MAX_PREFIX)}${suffix}`;
}

export function buildWarmMember(
  pool: PoolObj,
  template: TemplateObj,
  bpHash: string,
  eviction: boolean,
  name = memberName(pool.metadata.name!),
): Sandbox {
  const poolName = pool.metadata.name!;
  const tplName = template.metadata.name!;
  const hashLabels = {
    [LabelKeys.warmPoolSandbox]: poolHash(poolName),
    [LabelKeys.sandboxTemplateRefHash]: fnv1a32(tplName),
    [LabelKeys.sandboxTemplateHash]: bpHash,
  };
  const spec = sandboxSpecFromTemplate(template);
  const pt = spec.podTemplate;
  pt.metadata = { ...pt.metadata, labels: { ...pt.metadata?.labels, ...hashLabels } };
  if (eviction && pt.metadata.annotations?.[AnnotationKeys.safeToEvict] === undefined)
    pt.metadata.annotations = { ...pt.metadata.annotations, [AnnotationKeys.safeToEvict]: 'true' };
  return {
    apiVersion: `${Sandboxes.group}/${Sandboxes.version}`,
    kind: Sandboxes.kind,
    metadata: {
      name,
      namespace: pool.metadata.namespace,
      labels: { ...hashLabels, [LabelKeys.launchType]: 'warm', [LabelKeys.createdBy]: 'controller' },
      annotations: { [AnnotationKeys.sandboxTemplateRef]: tplName, [AnnotationKeys.podName]: name },
      ownerReferences: [controllerRef(pool, SandboxWarmPools)],
    },
    spec,
  };
}
