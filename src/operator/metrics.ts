/**
 * The operator's own Prometheus metrics (docs/operator.md "Metrics"), as factories over the manager's registry:
 * each returns the one instance registered in that registry (created on first use), so controllers that share a
 * manager share the metric and tests that build many managers never collide. Controllers add their metrics here.
 */
import { Gauge, Histogram, type Registry } from 'prom-client';

const memo = new WeakMap<Registry, Map<string, unknown>>();

function once<T>(registry: Registry, name: string, make: () => T): T {
  let byName = memo.get(registry);
  if (!byName) memo.set(registry, (byName = new Map()));
  if (!byName.has(name)) byName.set(name, make());
  return byName.get(name) as T;
}

/** Buckets of `agent_sandbox_creation_latency_ms` (the upstream operator's). */
export const CREATION_LATENCY_BUCKETS_MS = [
  50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 120000, 240000, 300000, 600000,
];

/** Sandbox Ready.lastTransitionTime − creationTimestamp, observed when a Sandbox turns Ready. */
export function sandboxCreationLatency(
  registry: Registry,
): Histogram<'namespace' | 'launch_type' | 'sandbox_template'> {
  return once(
    registry,
    'agent_sandbox_creation_latency_ms',
    () =>
      new Histogram({
        name: 'agent_sandbox_creation_latency_ms',
        help: 'Time from Sandbox creation to its Ready condition turning True, in milliseconds',
        labelNames: ['namespace', 'launch_type', 'sandbox_template'],
        buckets: CREATION_LATENCY_BUCKETS_MS,
        registers: [registry],
      }),
  );
}

export const SANDBOXES_GAUGE_LABELS = [
  'namespace',
  'ready_condition',
  'expired',
  'launch_type',
  'sandbox_template',
  'owned_by',
  'created_by',
] as const;
export type SandboxesGaugeLabels = Record<(typeof SANDBOXES_GAUGE_LABELS)[number], string>;

/**
 * `agent_sandboxes`: counts by label set, computed on scrape from `rows()` (an informer cache walk, never an
 * API LIST). Registering a second source for the same registry replaces the first.
 */
export function sandboxesGauge(
  registry: Registry,
  rows: () => Iterable<SandboxesGaugeLabels>,
): Gauge<(typeof SANDBOXES_GAUGE_LABELS)[number]> {
  const state = once(registry, 'agent_sandboxes:source', () => ({ rows }));
  state.rows = rows;
  return once(
    registry,
    'agent_sandboxes',
    () =>
      new Gauge({
        name: 'agent_sandboxes',
        help: 'Sandboxes by state, computed from the operator cache on scrape',
        labelNames: [...SANDBOXES_GAUGE_LABELS],
        registers: [registry],
        collect() {
          this.reset();
          const counts = new Map<string, { labels: SandboxesGaugeLabels; n: number }>();
          for (const labels of state.rows()) {
            const key = SANDBOXES_GAUGE_LABELS.map((l) => labels[l]).join('\u0000');
            const entry = counts.get(key);
            if (entry) entry.n++;
            else counts.set(key, { labels, n: 1 });
          }
          for (const { labels, n } of counts.values()) this.set(labels, n);
        },
      }),
  );
}
