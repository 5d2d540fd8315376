/**
 * Which warm pool a gateway claim draws from: its SandboxWarmPool names a SandboxTemplate, whose pool key comes
 * from src/api/pool-key.ts — the one function the aggregated create and the warm-pool driver use, so a claim here
 * draws from exactly the pool the driver filled for it. Pools and templates come from informers (O(pools) objects
 * per node, no read on the claim path); the key is derived once per template version.
 */
import type { SandboxTemplate, SandboxWarmPool } from '../../api/index.js';
import type { ObjectMeta } from '../../api/meta.js';
import { derivePoolKey, type PoolKeyOf } from '../../api/pool-key.js';
import { Informer, SandboxTemplates, SandboxWarmPools, type KubeClient } from '../../kube/index.js';
import type { Logger } from '../../log/logger.js';
import { SandboxError } from '../../errors.js';

type PoolObj = SandboxWarmPool & { metadata: ObjectMeta };
type TemplateObj = SandboxTemplate & { metadata: ObjectMeta };

export interface ResolvedPool {
  key: PoolKeyOf;
  /** The SandboxTemplate's name (the claim's `sandbox-template-ref`). */
  template: string;
  podTemplate: SandboxTemplate['spec']['podTemplate'];
}

export class PoolResolver {
  readonly pools: Informer<PoolObj>;
  readonly templates: Informer<TemplateObj>;
  private readonly resolved = new WeakMap<TemplateObj, ResolvedPool | SandboxError>();

  constructor(client: KubeClient, log: Logger) {
    this.pools = new Informer<PoolObj>(client, SandboxWarmPools, { logger: log });
    this.templates = new Informer<TemplateObj>(client, SandboxTemplates, { logger: log });
  }

  start(signal: AbortSignal): void {
    void this.pools.start(signal);
    void this.templates.start(signal);
  }

  get synced(): boolean {
    return this.pools.hasSynced && this.templates.hasSynced;
  }

  /** The pool key of `namespace/pool`; throws the SandboxError to answer (404, 400, 503) when it cannot be resolved. */
  resolve(namespace: string, pool: string): ResolvedPool {
    if (!this.synced)
      throw new SandboxError(
        'sandboxd.gateway-not-ready',
        'the claim gateway is still reading SandboxWarmPools; retry shortly',
      );
    const p = this.pools.getByName(namespace, pool);
    if (!p) throw new SandboxError('sandboxd.not-found', `SandboxWarmPool ${namespace}/${pool} not found`);
    const name = p.spec.sandboxTemplateRef.name;
    const tpl = this.templates.getByName(namespace, name);
    if (!tpl)
      throw new SandboxError(
        'sandboxd.not-found',
        `SandboxTemplate ${namespace}/${name} (of SandboxWarmPool ${pool}) not found`,
      );
    let r = this.resolved.get(tpl);
    if (!r) {
      const k = derivePoolKey({ annotations: tpl.metadata.annotations, podTemplate: tpl.spec.podTemplate });
      r = k.ok
        ? { key: k.key, template: name, podTemplate: tpl.spec.podTemplate }
        : new SandboxError(
            'sandboxd.bad-request',
            `SandboxTemplate ${namespace}/${name} names no pool: ${k.field}: ${k.message}`,
          );
      this.resolved.set(tpl, r);
    }
    if (r instanceof SandboxError) throw r;
    return r;
  }
}
