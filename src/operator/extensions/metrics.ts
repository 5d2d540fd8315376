/**
 * Metrics of the extension controllers (docs/extensions.md, the table): claim latency histograms, claim and warm-create
 * counters. One set per registry (the manager's), created on first use.
 */
import { Counter, Histogram, type Registry } from 'prom-client';

const CLAIM_BUCKETS = [100, 250, 500, 750, 1000, 1250, 1500, 2000, 2500, 5000, 10000, 30000, 60000, 120000, 240000];

function make(registry: Registry) {
  return {
    claimStartupLatency: new Histogram({
      name: 'agent_sandbox_claim_startup_latency_ms',
      help: 'Claim Ready time minus the webhook-first-observed-at annotation (ms)',
      labelNames: ['launch_type', 'sandbox_template', 'warmpool_name'],
      buckets: CLAIM_BUCKETS,
      registers: [registry],
    }),
    claimControllerStartupLatency: new Histogram({
      name: 'agent_sandbox_claim_controller_startup_latency_ms',
      help: 'Claim Ready time minus the controller-first-observed-at annotation (ms)',
      labelNames: ['launch_type', 'sandbox_template', 'warmpool_name'],
      buckets: CLAIM_BUCKETS,
      registers: [registry],
    }),
    claimCreation: new Counter({
      name: 'agent_sandbox_claim_creation_total',
      help: 'Sandboxes bound to claims, by adoption (warm) or creation (cold)',
      labelNames: ['namespace', 'sandbox_template', 'launch_type', 'warmpool_name', 'pod_condition', 'created_by'],
      registers: [registry],
    }),
    warmCreated: new Counter({
      name: 'agent_sandbox_warm_created_total',
      help: 'Warm Sandboxes created by the pool controller',
      labelNames: ['namespace', 'warmpool_name'],
      registers: [registry],
    }),
  };
}

export type ExtensionMetrics = ReturnType<typeof make>;
const cache = new WeakMap<Registry, ExtensionMetrics>();

export function extensionMetrics(registry: Registry): ExtensionMetrics {
  let m = cache.get(registry);
  if (!m) cache.set(registry, (m = make(registry)));
  return m;
}

const CREATED_BY = new Set(['go-client', 'python-client', 'controller', 'loadgen']);

/** created_by label values are an allow-list (docs/operator.md "What a reconcile does", step 4). */
export function normalizeCreatedBy(v: string | undefined): string {
  return v !== undefined && CREATED_BY.has(v) ? v : 'unknown';
}
