/** Whether `path` is one of `bases` or below one (`/healthz` covers `/healthz/etcd`, not `/healthzx`). */
export function isPathOrSubpath(path: string, bases: readonly string[]): boolean {
  return bases.some((base) => path === base || path.startsWith(base.endsWith('/') ? base : `${base}/`));
}

/**
 * The health endpoints (docs/aggregated-layout.md "What the aggregator and kubectl need from the server"): kubelet
 * probes them without credentials, and no authorizer is asked.
 */
export const HEALTH_PATHS: readonly string[] = ['/healthz', '/readyz', '/livez'];
