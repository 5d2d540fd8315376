/**
 * fast-check generators of valid agent-sandbox objects, as the apiserver hands them to the conversion webhook:
 * structurally valid, CRD defaults applied, no empty annotation maps (the apiserver drops them).
 */
import fc from 'fast-check';
import {
  ConversionKeys,
  AnnotationKeys,
  type Condition,
  type ObjectMeta,
  type PersistentVolumeClaimTemplate,
  type PodTemplate,
  type Sandbox,
  type SandboxClaim,
  type SandboxClaimV1alpha1,
  type SandboxTemplate,
  type SandboxTemplateV1alpha1,
  type SandboxV1alpha1,
  type SandboxWarmPool,
  type SandboxWarmPoolV1alpha1,
} from '../../src/api/index.js';

const opt = <T>(arb: fc.Arbitrary<T>) => fc.option(arb, { nil: undefined, freq: 2 });

/** Builds an object without undefined members. */
function compact<T extends object>(obj: T): T {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(obj)) if (v !== undefined) out[k] = v;
  return out as T;
}

// Cheap generators (stringMatching is slow): DNS-1123 names with and without dashes.
export const dnsName = fc
  .tuple(fc.constantFrom('a', 'web', 'pool', 'tpl', 'python', 'x9'), fc.nat(9999))
  .map(([p, n]) => (n % 3 === 0 ? p : n % 3 === 1 ? `${p}-${n}` : `${p}-${n.toString(36)}-z`));
const shortText = fc.string({ maxLength: 12 });
const time = fc
  .integer({ min: 1_600_000_000, max: 2_000_000_000 })
  .map((s) => new Date(s * 1000).toISOString().replace('.000Z', 'Z'));
const int32 = fc.integer({ min: 0, max: 2 ** 31 - 1 });

const labelKey = fc
  .tuple(fc.constantFrom('', 'example.io/', 'sandbox.users.io/'), fc.constantFrom('app', 'tier', 'team', 'x', 'a-b'))
  .map(([p, k]) => p + k);
const labelMap = fc.dictionary(labelKey, shortText, {
  minKeys: 1,
  maxKeys: 3,
});

/** Annotations, sometimes including a given reserved key with a given value generator. */
function annotationMap(extra: [string, fc.Arbitrary<string>][]): fc.Arbitrary<Record<string, string> | undefined> {
  return fc
    .tuple(opt(labelMap), ...extra.map(([key, value]) => opt(value.map((v) => [key, v] as const))))
    .map(([base, ...pairs]) => {
      const out: Record<string, string> = { ...base };
      for (const p of pairs) if (p) out[p[0]] = p[1];
      return Object.keys(out).length > 0 ? out : undefined;
    });
}

function metadata(extra: [string, fc.Arbitrary<string>][] = []): fc.Arbitrary<ObjectMeta> {
  return fc
    .record({
      name: dnsName,
      namespace: dnsName,
      uid: fc.uuid(),
      resourceVersion: fc.integer({ min: 1 }).map(String),
      generation: fc.integer({ min: 1, max: 1000 }),
      creationTimestamp: time,
      labels: opt(labelMap),
      annotations: annotationMap(extra),
    })
    .map(compact);
}

const condition: fc.Arbitrary<Condition> = fc
  .record({
    type: fc.constantFrom('Ready', 'Suspended', 'Finished', 'PodScheduled'),
    status: fc.constantFrom('True', 'False', 'Unknown' as const),
    observedGeneration: opt(fc.integer({ min: 0, max: 1000 })),
    lastTransitionTime: time,
    reason: fc.constantFrom('DependenciesReady', 'SandboxSuspended', 'PodSucceeded', 'ClaimExpired'),
    message: shortText,
  })
  .map(compact);
const conditions = opt(fc.array(condition, { maxLength: 3 }));

const container = fc
  .record({
    name: dnsName,
    image: fc.constantFrom('busybox:1.36', 'registry.k8s.io/pause:3.10', 'python:3.12'),
    command: opt(fc.array(shortText, { maxLength: 3 })),
    env: opt(
      fc.array(fc.record({ name: fc.constantFrom('PATH', 'HOME', 'A_B', 'X'), value: shortText }), { maxLength: 2 }),
    ),
    ports: opt(
      fc.array(fc.record({ containerPort: fc.integer({ min: 1, max: 65535 }), protocol: fc.constant('TCP') }), {
        maxLength: 2,
      }),
    ),
    resources: opt(
      fc.record({ requests: fc.record({ cpu: fc.constantFrom('100m', '1'), memory: fc.constantFrom('64Mi', '1Gi') }) }),
    ),
  })
  .map(compact);

export const podTemplate: fc.Arbitrary<PodTemplate> = fc
  .record({
    metadata: opt(fc.record({ labels: opt(labelMap), annotations: opt(labelMap) }).map(compact)),
    spec: fc
      .record({
        containers: fc.array(container, { minLength: 1, maxLength: 2 }),
        restartPolicy: opt(fc.constantFrom('Always', 'Never')),
        nodeSelector: opt(labelMap),
        automountServiceAccountToken: opt(fc.boolean()),
      })
      .map(compact),
  })
  .map(compact);

export const volumeClaimTemplate: fc.Arbitrary<PersistentVolumeClaimTemplate> = fc
  .record({
    metadata: opt(fc.record({ name: opt(dnsName), labels: opt(labelMap), annotations: opt(labelMap) }).map(compact)),
    spec: fc
      .record({
        accessModes: opt(fc.constant<string[]>(['ReadWriteOnce'])),
        resources: opt(fc.record({ requests: fc.record({ storage: fc.constantFrom('1Gi', '10Gi') }) })),
        storageClassName: opt(dnsName),
      })
      .map(compact),
  })
  .map(compact);
const vcts = opt(fc.array(volumeClaimTemplate, { maxLength: 2 }));

const anyStateString = fc.oneof(shortText, fc.json());

// ---------------------------------------------------------------------------------------------- Sandbox

const sandboxState = fc.record({ spec: opt(fc.integer({ min: 0, max: 1 })), status: opt(int32) }).map((s) =>
  JSON.stringify({
    spec: s.spec === undefined ? {} : { replicas: s.spec },
    status: s.status === undefined ? {} : { replicas: s.status },
  }),
);

export const sandboxV1beta1: fc.Arbitrary<Sandbox> = fc
  .record({
    apiVersion: fc.constant('agents.x-k8s.io/v1beta1'),
    kind: fc.constant('Sandbox'),
    metadata: metadata([
      [ConversionKeys.sandboxV1alpha1State, sandboxState],
      [ConversionKeys.sandboxV1beta1State, anyStateString],
    ]),
    spec: fc
      .record({
        podTemplate,
        volumeClaimTemplates: vcts,
        service: opt(fc.boolean()),
        shutdownTime: opt(time),
        shutdownPolicy: fc.constantFrom('Delete', 'Retain' as const),
        operatingMode: fc.constantFrom('Running', 'Suspended' as const),
      })
      .map(compact),
    status: opt(
      fc
        .record({
          serviceFQDN: opt(shortText),
          service: opt(dnsName),
          conditions,
          selector: opt(shortText),
          podIPs: opt(fc.array(fc.ipV4(), { maxLength: 2 })),
          nodeName: opt(dnsName),
        })
        .map(compact),
    ),
  })
  .map(compact);

export const sandboxV1alpha1: fc.Arbitrary<SandboxV1alpha1> = fc
  .record({
    apiVersion: fc.constant('agents.x-k8s.io/v1alpha1'),
    kind: fc.constant('Sandbox'),
    metadata: metadata(),
    spec: fc
      .record({
        podTemplate,
        volumeClaimTemplates: vcts,
        shutdownTime: opt(time),
        shutdownPolicy: fc.constantFrom('Delete', 'Retain' as const),
        replicas: fc.option(fc.integer({ min: 0, max: 1 }), { nil: undefined, freq: 5 }),
        service: opt(fc.boolean()),
      })
      .map(compact),
    status: opt(
      fc
        .record({
          serviceFQDN: opt(shortText),
          service: opt(dnsName),
          conditions,
          replicas: opt(int32),
          selector: opt(shortText),
          podIPs: opt(fc.array(fc.ipV4(), { maxLength: 2 })),
        })
        .map(compact),
    ),
  })
  .map(compact);

// ---------------------------------------------------------------------------------------------- SandboxTemplate

const networkPolicy = opt(
  fc
    .record({
      ingress: opt(
        fc.array(
          fc
            .record({
              ports: opt(
                fc.array(fc.record({ port: fc.oneof(fc.integer({ min: 1, max: 65535 }), dnsName) }), { maxLength: 1 }),
              ),
            })
            .map(compact),
          { maxLength: 2 },
        ),
      ),
      egress: opt(
        fc.array(
          fc.record({
            to: fc.array(fc.record({ ipBlock: fc.record({ cidr: fc.constantFrom('0.0.0.0/0', '10.0.0.0/8') }) }), {
              maxLength: 2,
            }),
          }),
          { maxLength: 2 },
        ),
      ),
    })
    .map(compact),
);

const templateCommon = {
  podTemplate,
  volumeClaimTemplates: vcts,
  service: opt(fc.boolean()),
  networkPolicy,
  networkPolicyManagement: fc.constantFrom('Managed', 'Unmanaged' as const),
  envVarsInjectionPolicy: fc.constantFrom('Allowed', 'Overrides', 'Disallowed' as const),
};
const vctPolicy = fc.constantFrom('Disallowed', 'Allowed', 'Overrides' as const);

export const sandboxTemplateV1beta1: fc.Arbitrary<SandboxTemplate> = fc
  .record({
    apiVersion: fc.constant('extensions.agents.x-k8s.io/v1beta1'),
    kind: fc.constant('SandboxTemplate'),
    metadata: metadata([
      [ConversionKeys.sandboxTemplateV1alpha1State, anyStateString],
      [ConversionKeys.volumeClaimTemplatesPolicy, shortText],
      [ConversionKeys.sandboxTemplateV1beta1State, anyStateString],
    ]),
    spec: fc.record({ ...templateCommon, volumeClaimTemplatesPolicy: vctPolicy }).map(compact),
  })
  .map(compact);

export const sandboxTemplateV1alpha1: fc.Arbitrary<SandboxTemplateV1alpha1> = fc
  .record({
    apiVersion: fc.constant('extensions.agents.x-k8s.io/v1alpha1'),
    kind: fc.constant('SandboxTemplate'),
    metadata: metadata([[ConversionKeys.volumeClaimTemplatesPolicy, vctPolicy]]),
    spec: fc.record(templateCommon).map(compact),
  })
  .map(compact);

// ---------------------------------------------------------------------------------------------- SandboxWarmPool

const updateStrategy = opt(fc.record({ type: fc.constantFrom('Recreate', 'OnReplenish' as const) }));

export const sandboxWarmPoolV1beta1: fc.Arbitrary<SandboxWarmPool> = fc
  .record({
    apiVersion: fc.constant('extensions.agents.x-k8s.io/v1beta1'),
    kind: fc.constant('SandboxWarmPool'),
    metadata: metadata([
      [ConversionKeys.sandboxWarmPoolV1alpha1State, fc.constantFrom('{"spec":{}}', '{"spec":{"replicas":3}}', '{}')],
      [ConversionKeys.sandboxWarmPoolV1beta1State, anyStateString],
    ]),
    spec: fc
      .record({
        replicas: fc.option(int32, { nil: undefined, freq: 8 }),
        sandboxTemplateRef: fc.record({ name: dnsName }),
        updateStrategy,
      })
      .map(compact),
    status: opt(
      fc
        .record({
          replicas: opt(int32),
          readyReplicas: opt(int32),
          selector: opt(shortText),
          observedGeneration: opt(fc.integer({ min: 0 })),
        })
        .map(compact),
    ),
  })
  .map(compact);

export const sandboxWarmPoolV1alpha1: fc.Arbitrary<SandboxWarmPoolV1alpha1> = fc
  .record({
    apiVersion: fc.constant('extensions.agents.x-k8s.io/v1alpha1'),
    kind: fc.constant('SandboxWarmPool'),
    metadata: metadata(),
    spec: fc.record({ replicas: int32, sandboxTemplateRef: fc.record({ name: dnsName }), updateStrategy }).map(compact),
    status: opt(fc.record({ replicas: opt(int32), readyReplicas: opt(int32), selector: opt(shortText) }).map(compact)),
  })
  .map(compact);

// ---------------------------------------------------------------------------------------------- SandboxClaim

/** Pool names that exercise every derivation rule, including shadow pools. */
const poolName = fc.oneof(
  dnsName,
  dnsName.map((t) => `shadow-pool-${t}`),
  fc.constantFrom('none', 'default', 'shadow-pool-'),
);
const warmpool = fc.oneof(fc.constantFrom('none', 'default', ''), dnsName, poolName);
const claimStatus = opt(
  fc
    .record({
      conditions,
      sandbox: opt(
        fc
          .record({
            name: opt(
              fc.oneof(
                dnsName,
                poolName.map((p) => `${p}-x7k2q`),
              ),
            ),
            podIPs: opt(fc.array(fc.ipV4(), { maxLength: 2 })),
            serviceFQDN: opt(dnsName.map((n) => `${n}.team-a.svc.cluster.local`)),
          })
          .map(compact),
      ),
    })
    .map(compact),
);
const lifecycle = opt(
  fc
    .record({
      shutdownTime: opt(time),
      ttlSecondsAfterFinished: opt(int32),
      shutdownPolicy: fc.constantFrom('Delete', 'DeleteForeground', 'Retain' as const),
    })
    .map(compact),
);
const claimCommon = {
  lifecycle,
  additionalPodMetadata: opt(fc.record({ labels: opt(labelMap), annotations: opt(labelMap) }).map(compact)),
  env: opt(
    fc.array(
      fc
        .record({ name: fc.constantFrom('PATH', 'HOME', 'A_B', 'X'), value: shortText, containerName: opt(dnsName) })
        .map(compact),
      {
        maxLength: 2,
      },
    ),
  ),
};
const claimState = fc.record({ name: opt(dnsName), warmpool: opt(warmpool) }).map((s) =>
  JSON.stringify({
    spec: compact({ sandboxTemplateRef: s.name === undefined ? undefined : { name: s.name }, warmpool: s.warmpool }),
  }),
);

export const sandboxClaimV1beta1: fc.Arbitrary<SandboxClaim> = fc
  .record({
    apiVersion: fc.constant('extensions.agents.x-k8s.io/v1beta1'),
    kind: fc.constant('SandboxClaim'),
    metadata: metadata([
      [ConversionKeys.sandboxClaimV1alpha1State, claimState],
      [AnnotationKeys.sandboxTemplateRef, dnsName],
      [ConversionKeys.sandboxClaimVolumeClaimTemplates, shortText],
      [ConversionKeys.sandboxClaimV1beta1State, anyStateString],
    ]),
    spec: fc
      .record({ warmPoolRef: fc.record({ name: poolName }), ...claimCommon, volumeClaimTemplates: vcts })
      .map(compact),
    status: claimStatus,
  })
  .map(compact);

export const sandboxClaimV1alpha1: fc.Arbitrary<SandboxClaimV1alpha1> = fc
  .record({
    apiVersion: fc.constant('extensions.agents.x-k8s.io/v1alpha1'),
    kind: fc.constant('SandboxClaim'),
    metadata: metadata([
      [AnnotationKeys.sandboxTemplateRef, dnsName],
      [
        ConversionKeys.sandboxClaimVolumeClaimTemplates,
        fc.array(volumeClaimTemplate, { maxLength: 2 }).map((v) => JSON.stringify(v)),
      ],
    ]),
    spec: fc
      .record({
        sandboxTemplateRef: fc.record({ name: dnsName }),
        warmpool: fc.option(warmpool, { nil: undefined, freq: 8 }),
        ...claimCommon,
      })
      .map(compact),
    status: claimStatus,
  })
  .map(compact);
