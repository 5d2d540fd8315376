/**
 * The chart's values: their schema (written out as values.schema.json, which `helm lint`/`install` enforce) and
 * their defaults (values.yaml, and what the kustomize rendering is made of). Every knob an installer turns is
 * here; the manifests in components.ts read them through ParamFactory, so a value the manifests use but the
 * schema lacks fails the generator.
 */
import { readFileSync } from 'node:fs';
import { Type, type Static, type TSchema } from '@sinclair/typebox';
import { RUNTIMES } from '../operator/options.js';
import { DEFAULT_CHECKPOINT_REPLICAS } from '../sandboxd/placement/replicate.js';

export const LAYOUTS = ['crd', 'aggregated'] as const;
export type Layout = (typeof LAYOUTS)[number];

/** The namespace the kustomize rendering installs into (the chart uses the release namespace). */
export const DEFAULT_NAMESPACE = 'sandbox-system';
export const CHART_NAME = 'sandbox-operator';
export const APP_VERSION = (
  JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }
).version;

const enumOf = <T extends readonly string[]>(values: T, description: string) =>
  Type.Unsafe<T[number]>({ type: 'string', enum: [...values], description });
const str = (description: string) => Type.String({ description });
const int = (description: string, minimum = 0) => Type.Integer({ description, minimum });
const bool = (description: string) => Type.Boolean({ description });
const map = (description: string) => Type.Record(Type.String(), Type.Unknown(), { description });
const list = (description: string) => Type.Array(Type.Unknown(), { description });
const strict = <T extends Record<string, TSchema>>(props: T, description: string) =>
  Type.Object(props, { additionalProperties: false, description });

/** What every workload shares: where it runs and how big it is. */
const placement = {
  resources: map('requests and limits of the container (a core/v1 ResourceRequirements)'),
  nodeSelector: map('node labels the pods must match'),
  tolerations: list('tolerations of the pods'),
  logLevel: enumOf(['debug', 'info', 'warn', 'error'] as const, 'log level'),
};

export const ValuesSchema = strict(
  {
    layout: enumOf(
      LAYOUTS,
      'crd: Sandboxes are custom resources reconciled by sandbox-operator (any runtime); aggregated: sandbox-apiserver serves them from the sandboxd nodes (docs/aggregated-layout.md)',
    ),
    defaultRuntime: enumOf(RUNTIMES, 'sandbox-operator --default-runtime: the runtime of a Sandbox that names none'),
    crds: strict(
      {
        serveV1alpha1: bool(
          "serve v1alpha1 beside v1beta1 (upstream clients of v1alpha1). kube-apiserver keeps a watch cache per served version and converts every write of these kinds to v1alpha1 through the operator's webhook for it (about 5 calls per warm claim, PERFORMANCE.md); false, when no client uses v1alpha1, saves that",
        ),
        v1beta1Only: bool(
          'list v1beta1 alone in the CRDs (served and stored, no conversion webhook), as a cluster that no longer has v1alpha1 objects or clients wants; serveV1alpha1 then does not apply. Rewrite stored objects as v1beta1 before turning it on (docs/api.md "Migrating to v1beta1")',
        ),
      },
      'the CustomResourceDefinitions',
    ),
    certManager: strict(
      {
        enabled: bool(
          'serving certificates from cert-manager (Certificate + CA injection); off: the operator manages its webhook certificate and the chart generates the aggregated apiserver one',
        ),
      },
      'cert-manager integration',
    ),
    images: strict(
      {
        operator: str('sandbox-operator image'),
        apiserver: str('sandbox-apiserver image'),
        sandboxd: str('sandboxd image (QEMU, the guest images and agent)'),
        pullPolicy: enumOf(['Always', 'IfNotPresent', 'Never'] as const, 'imagePullPolicy of every container'),
      },
      'container images (build them with deploy/images/Dockerfile)',
    ),
    operator: strict(
      {
        replicas: int('replicas (one leads the controllers, all serve the conversion webhook)', 1),
        disableSandboxEvents: bool(
          'sandbox-operator --disable-sandbox-events: no lifecycle Events on Sandboxes (SandboxPodCreated, SandboxReady, ...)',
        ),
        ...placement,
      },
      'sandbox-operator Deployment (crd layout)',
    ),
    apiserver: strict(
      {
        replicas: int('replicas behind the APIService', 1),
        disableSandboxEvents: bool(
          'sandbox-apiserver --disable-sandbox-events: no Events for the lifecycle verbs (SandboxPaused, SandboxForked, ...)',
        ),
        ...placement,
      },
      'sandbox-apiserver Deployment (aggregated layout)',
    ),
    sandboxd: strict(
      {
        pools: str('initial warm pools, template[:net[:size]]=N comma separated (sandboxd --pools)'),
        maxClaims: int('claimed sandboxes per node at most (sandboxd --max-claims)', 1),
        checkpointReplicas: int(
          'nodes that keep a copy of each checkpoint, copied in the background (sandboxd --checkpoint-replicas; 1: only where it was taken)',
          1,
        ),
        dataHostPath: str(
          "the node's directory for sandboxd's claim table, checkpoints and kubelet certificate (a hostPath: they outlive the pod)",
        ),
        ...placement,
      },
      'sandboxd DaemonSet: one node daemon per VM host',
    ),
    monitoring: strict(
      {
        serviceMonitor: bool('a prometheus-operator ServiceMonitor per component (needs its CRDs)'),
        prometheusRule: bool('the alerts as a prometheus-operator PrometheusRule (needs its CRDs)'),
        dashboard: bool('the Grafana dashboard as a ConfigMap labelled grafana_dashboard=1 (Grafana sidecar)'),
      },
      'Prometheus scraping, alerts and the Grafana dashboard',
    ),
  },
  'sandbox-operator chart values',
);
export type Values = Static<typeof ValuesSchema>;

export const DEFAULT_VALUES: Values = {
  layout: 'crd',
  defaultRuntime: 'standard',
  crds: { serveV1alpha1: true, v1beta1Only: false },
  certManager: { enabled: false },
  images: {
    operator: `sandbox-operator:${APP_VERSION}`,
    apiserver: `sandbox-apiserver:${APP_VERSION}`,
    sandboxd: `sandboxd:${APP_VERSION}`,
    pullPolicy: 'IfNotPresent',
  },
  operator: {
    replicas: 2,
    disableSandboxEvents: false,
    resources: { requests: { cpu: '100m', memory: '256Mi' }, limits: { memory: '1Gi' } },
    nodeSelector: {},
    tolerations: [],
    logLevel: 'info',
  },
  apiserver: {
    replicas: 2,
    disableSandboxEvents: false,
    resources: { requests: { cpu: '100m', memory: '256Mi' }, limits: { memory: '1Gi' } },
    nodeSelector: {},
    tolerations: [],
    logLevel: 'info',
  },
  sandboxd: {
    pools: '',
    maxClaims: 200,
    checkpointReplicas: DEFAULT_CHECKPOINT_REPLICAS,
    dataHostPath: '/var/lib/sandboxd',
    // No memory limit by default: the VMs' RAM is charged to this pod, and a limit would OOM-kill sandboxes.
    resources: { requests: { cpu: '500m', memory: '1Gi' } },
    nodeSelector: {},
    tolerations: [],
    logLevel: 'info',
  },
  monitoring: { serviceMonitor: false, prometheusRule: false, dashboard: true },
};
