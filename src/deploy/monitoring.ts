/**
 * What operators watch: the alerts they page on and a Grafana dashboard, every expression over metrics the
 * components export (test/deploy/monitoring.test.ts parses each expression with the PromQL grammar and checks its
 * metric names against the components' real /metrics), and the objects that wire them into a cluster: a
 * ServiceMonitor per component, the PrometheusRule, and the dashboard as a ConfigMap for Grafana's sidecar.
 */
import { APISERVER, meta, OPERATOR, SANDBOXD, type BuildContext, type Part } from './model.js';
import type { Manifest } from './params.js';
import { APISERVER_TLS_SECRET, SANDBOXD_TOKEN_SECRET } from './workloads.js';

export interface AlertRule {
  alert: string;
  expr: string;
  for: string;
  labels: { severity: 'critical' | 'warning' };
  annotations: { summary: string; description: string };
}

/** Prometheus's own series about its targets (not exported by any component, but present for every one). */
export const PROMETHEUS_SERIES = ['up'] as const;

const claimRoute = 'route=~".*v1.*claim.*|gateway"';

export const ALERT_GROUPS: ReadonlyArray<{ name: string; rules: AlertRule[] }> = [
  {
    name: 'sandbox-operator',
    rules: [
      {
        alert: 'SandboxWarmPoolEmpty',
        expr: 'max by (instance, template, net, size) (sandboxd_pool_target) > 0 and max by (instance, template, net, size) (sandboxd_pool_warm) == 0',
        for: '5m',
        labels: { severity: 'critical' },
        annotations: {
          summary:
            'No warm VM left in pool {{ $labels.template }} ({{ $labels.net }}/{{ $labels.size }}) on {{ $labels.instance }}',
          description:
            "Every claim on this pool boots or restores a VM (or fails with warm_only). Check the node's refill errors (GET /v1/pools) and raise its target or add nodes.",
        },
      },
      {
        alert: 'SandboxClaimsServedCold',
        expr: 'sum by (namespace, warmpool_name) (rate(agent_sandbox_claim_creation_total{launch_type="cold"}[10m])) / sum by (namespace, warmpool_name) (rate(agent_sandbox_claim_creation_total[10m])) > 0.5',
        for: '10m',
        labels: { severity: 'warning' },
        annotations: {
          summary: 'Most claims on warm pool {{ $labels.namespace }}/{{ $labels.warmpool_name }} get a cold Sandbox',
          description:
            'The pool has no ready member when claims arrive: raise its replicas or check why members do not become Ready.',
        },
      },
      {
        alert: 'SandboxClaimsFailing',
        expr: 'sum by (controller) (rate(controller_runtime_reconcile_errors_total{controller="sandboxclaim"}[5m])) > 0',
        for: '10m',
        labels: { severity: 'critical' },
        annotations: {
          summary: 'SandboxClaim reconciles keep failing',
          description:
            'Claims are not being bound. The operator logs name the claim and the error (controller=sandboxclaim).',
        },
      },
      {
        alert: 'SandboxdClaimsFailing',
        expr: `sum by (instance) (rate(sandboxd_http_requests_total{${claimRoute}, code=~"5..|429"}[5m])) > 0`,
        for: '5m',
        labels: { severity: 'critical' },
        annotations: {
          summary: 'sandboxd on {{ $labels.instance }} refuses or fails claims',
          description: '429: --max-claims reached or a warm_only miss; 5xx: a clone failed (see the sandboxd log).',
        },
      },
      {
        alert: 'SandboxApiserverCreatesFailing',
        expr: 'sum(rate(apiserver_request_total{resource="sandboxes", verb="create", code=~"5.."}[5m])) > 0',
        for: '5m',
        labels: { severity: 'critical' },
        annotations: {
          summary: 'sandbox-apiserver fails Sandbox creates',
          description:
            '503 names the pool key with no warm capacity on any node; other 5xx are node errors (see the server log).',
        },
      },
      {
        alert: 'SandboxdDown',
        expr: 'up{job="sandboxd-metrics"} == 0',
        for: '5m',
        labels: { severity: 'critical' },
        annotations: {
          summary: 'sandboxd on {{ $labels.instance }} is down',
          description: 'Its VMs cannot be claimed or managed. kubectl -n <namespace> describe pod on that node.',
        },
      },
      {
        alert: 'SandboxdNodesUnavailable',
        expr: 'max(sandbox_apiserver_nodes{state="unavailable"}) > 0',
        for: '5m',
        labels: { severity: 'critical' },
        annotations: {
          summary: 'sandbox-apiserver has lost the change feed of {{ $value }} node(s)',
          description:
            'Their sandboxes are left out of lists (a Warning header names the nodes). Check sandboxd on those nodes and its token.',
        },
      },
      {
        alert: 'SandboxWebhookCertificateExpiring',
        expr: 'min(agent_sandbox_webhook_certificate_expiry_timestamp_seconds) - time() < 14 * 86400',
        for: '1h',
        labels: { severity: 'warning' },
        annotations: {
          summary: 'The conversion webhook serving certificate expires within 14 days',
          description:
            'Renewal (30 days ahead, by the operator or cert-manager) has not happened: check the operator log or the Certificate sandbox-webhook.',
        },
      },
    ],
  },
];

interface Panel {
  title: string;
  unit: string;
  targets: Array<{ expr: string; legend: string }>;
}

const PANELS: readonly Panel[] = [
  {
    title: 'Claim latency, p50/p99 by launch type (claim Ready − first observed)',
    unit: 'ms',
    targets: [0.5, 0.99].map((q) => ({
      expr: `histogram_quantile(${q}, sum by (le, launch_type) (rate(agent_sandbox_claim_startup_latency_ms_bucket[5m])))`,
      legend: `p${q * 100} {{launch_type}}`,
    })),
  },
  {
    title: 'sandboxd claim handling, p99 by tier',
    unit: 's',
    targets: [
      {
        expr: 'histogram_quantile(0.99, sum by (le, tier) (rate(sandboxd_claim_seconds_bucket[5m])))',
        legend: '{{tier}}',
      },
    ],
  },
  {
    title: 'Warm pool fill (warm / target)',
    unit: 'percentunit',
    targets: [
      {
        expr: 'sum by (template, net, size) (sandboxd_pool_warm) / sum by (template, net, size) (sandboxd_pool_target)',
        legend: '{{template}} {{net}}/{{size}}',
      },
    ],
  },
  {
    title: 'Warm count per pool',
    unit: 'short',
    targets: [
      { expr: 'sum by (template, net, size) (sandboxd_pool_warm)', legend: 'sandboxd {{template}} {{net}}/{{size}}' },
      {
        expr: 'sum by (namespace, sandbox_template) (agent_sandboxes{owned_by="SandboxWarmPool", ready_condition="true"})',
        legend: 'ready members {{namespace}}/{{sandbox_template}}',
      },
    ],
  },
  {
    title: 'Reconcile errors per second',
    unit: 'ops',
    targets: [
      { expr: 'sum by (controller) (rate(controller_runtime_reconcile_errors_total[5m]))', legend: '{{controller}}' },
    ],
  },
  {
    title: 'Workqueue depth',
    unit: 'short',
    targets: [{ expr: 'sum by (name) (workqueue_depth)', legend: '{{name}}' }],
  },
  {
    title: 'sandboxd claims per second',
    unit: 'ops',
    targets: [{ expr: 'sum by (instance, tier) (rate(sandboxd_claims_total[1m]))', legend: '{{instance}} {{tier}}' }],
  },
  {
    title: 'VM host memory per node (PSS: template pages shared by clones counted once)',
    unit: 'bytes',
    targets: [
      { expr: 'sum by (instance) (sandboxd_vm_memory_bytes{measure="pss"})', legend: '{{instance}} pss' },
      { expr: 'sum by (instance) (sandboxd_vm_memory_bytes{measure="rss"})', legend: '{{instance}} rss' },
    ],
  },
  {
    title: 'sandbox-apiserver requests per second',
    unit: 'reqps',
    targets: [{ expr: 'sum by (verb, code) (rate(apiserver_request_total[1m]))', legend: '{{verb}} {{code}}' }],
  },
  {
    title: 'Sandboxes by state',
    unit: 'short',
    targets: [
      {
        expr: 'sum by (ready_condition, launch_type) (agent_sandboxes)',
        legend: 'ready={{ready_condition}} {{launch_type}}',
      },
      { expr: 'sum(sandbox_apiserver_sandboxes)', legend: 'served by sandbox-apiserver' },
    ],
  },
];

export function dashboard(): Record<string, unknown> {
  return {
    title: 'sandbox-operator',
    uid: 'sandbox-operator',
    tags: ['sandbox-operator'],
    schemaVersion: 39,
    timezone: 'browser',
    refresh: '30s',
    time: { from: 'now-1h', to: 'now' },
    templating: {
      list: [{ name: 'datasource', label: 'Prometheus', type: 'datasource', query: 'prometheus' }],
    },
    panels: PANELS.map((p, i) => ({
      id: i + 1,
      title: p.title,
      type: 'timeseries',
      datasource: { type: 'prometheus', uid: '${datasource}' },
      gridPos: { h: 8, w: 12, x: (i % 2) * 12, y: Math.floor(i / 2) * 8 },
      fieldConfig: { defaults: { unit: p.unit }, overrides: [] },
      targets: p.targets.map((t, j) => ({
        refId: String.fromCharCode(65 + j),
        expr: t.expr,
        legendFormat: t.legend,
        datasource: { type: 'prometheus', uid: '${datasource}' },
      })),
    })),
  };
}

/** Every PromQL expression shipped (alerts and dashboard), with where it comes from. */
export function allExpressions(): Array<{ where: string; expr: string }> {
  return [
    ...ALERT_GROUPS.flatMap((g) => g.rules.map((r) => ({ where: `alert ${r.alert}`, expr: r.expr }))),
    ...PANELS.flatMap((p) => p.targets.map((t) => ({ where: `panel "${p.title}"`, expr: t.expr }))),
  ];
}

/** A Prometheus rule file (for a Prometheus without prometheus-operator). */
export function ruleFile(): Record<string, unknown> {
  return { groups: ALERT_GROUPS };
}

/** Selects the component's Services by name label; only the Service with the endpoint's port name is scraped. */
function serviceMonitor(c: BuildContext, component: string, endpoint: Manifest): Manifest {
  return {
    apiVersion: 'monitoring.coreos.com/v1',
    kind: 'ServiceMonitor',
    metadata: meta(component, component, c.ns),
    spec: {
      selector: { matchLabels: { 'app.kubernetes.io/name': component } },
      endpoints: [{ path: '/metrics', interval: '30s', ...endpoint }],
    },
  };
}

export function monitoringParts(c: BuildContext): Part[] {
  const crd = c.variant.layout === 'crd';
  const monitors: Manifest[] = [
    // sandboxd's /metrics needs the fleet's root token.
    serviceMonitor(c, SANDBOXD, {
      port: 'api',
      bearerTokenSecret: { name: SANDBOXD_TOKEN_SECRET, key: 'token' },
    }),
    crd
      ? serviceMonitor(c, OPERATOR, { port: 'metrics' })
      : // sandbox-apiserver authorizes /metrics like kube-apiserver: bind sandbox-metrics-reader to Prometheus.
        serviceMonitor(c, APISERVER, {
          port: 'https',
          scheme: 'https',
          bearerTokenFile: '/var/run/secrets/kubernetes.io/serviceaccount/token',
          tlsConfig: {
            ca: { secret: { name: APISERVER_TLS_SECRET, key: 'ca.crt' } },
            serverName: c.p.join([`${APISERVER}.`, c.ns, '.svc']),
          },
        }),
  ];
  if (!crd)
    monitors.push({
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRole',
      metadata: meta('sandbox-metrics-reader', APISERVER),
      rules: [{ nonResourceURLs: ['/metrics'], verbs: ['get'] }],
    });
  return [
    { file: 'servicemonitors.yaml', when: c.p.value('monitoring.serviceMonitor'), objects: monitors },
    {
      file: 'prometheusrule.yaml',
      when: c.p.value('monitoring.prometheusRule'),
      objects: [
        {
          apiVersion: 'monitoring.coreos.com/v1',
          kind: 'PrometheusRule',
          metadata: meta('sandbox-operator', OPERATOR, c.ns),
          spec: ruleFile(),
        },
      ],
    },
    {
      file: 'dashboard.yaml',
      when: c.p.value('monitoring.dashboard'),
      objects: [
        {
          apiVersion: 'v1',
          kind: 'ConfigMap',
          metadata: { ...meta('sandbox-operator-dashboard', OPERATOR, c.ns), labels: { grafana_dashboard: '1' } },
          data: { 'sandbox-operator.json': `${JSON.stringify(dashboard(), null, 2)}\n` },
        },
      ],
    },
  ];
}
