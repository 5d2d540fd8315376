/**
 * The warm-pool driver of the aggregated layout (docs/aggregated-layout.md "Warm pools"): SandboxWarmPools are
 * filled by the nodes themselves. Each pass (on any pool, template or node change, and every resync interval)
 * spreads every pool's replicas over the nodes that publish NodeInventory — sorted by name, floor(R/N) each and
 * one more for the first R mod N — and sends each node whose share changed one wholesale `PUT /v1/pools` under
 * the driver's owner name, so the node's own `--pools` and anything else it did not set are never drained. It is
 * the only writer of these pools' status (replicas: the targets it set; readyReplicas: warm VMs the nodes report),
 * and it marks each pool so the operator's SandboxWarmPool controller leaves it alone. Fixed against the reference:
 * a template it cannot read keeps that pool's last targets instead of draining it on every node.
 */
import { CocoonAnnotationKeys, type SandboxTemplate, type SandboxWarmPool } from '../api/index.js';
import { derivePoolKey, describePoolKey, poolKeyString, type PoolKeyOf } from '../api/pool-key.js';
import type { ObjectMeta } from '../api/meta.js';
import { SandboxWarmPools, type Informer, type KubeClient } from '../kube/index.js';
import type { Logger } from '../log/logger.js';
import type { Fleet } from './sandboxes/fleet.js';
import type { SandboxdClient } from './sandboxes/sandboxd-client.js';

export const DRIVER_OWNER = 'warm-pool-driver';
/** On a SandboxWarmPool: who fills it. The operator's warm-pool controller skips pools that carry it. */
export const SERVED_BY_ANNOTATION = CocoonAnnotationKeys.servedBy;
export const SERVED_BY_VALUE = 'sandbox-apiserver';

type PoolObj = SandboxWarmPool & { metadata: ObjectMeta };
type TemplateObj = SandboxTemplate & { metadata: ObjectMeta };

interface Desired {
  key: PoolKeyOf;
  replicas: number;
}

/** `total` over `nodes` (sorted): floor each, one more for the first `total mod n`. */
export function spread(total: number, nodes: readonly string[]): Map<string, number> {
  const out = new Map<string, number>();
  const n = nodes.length;
  nodes.forEach((node, i) => out.set(node, n ? Math.floor(total / n) + (i < total % n ? 1 : 0) : 0));
  return out;
}

export class WarmPoolDriver {
  /** Per pool (ns/name): its key and replicas as last resolved, kept when its template cannot be read. */
  private readonly lastGood = new Map<string, Desired>();
  /** Per node: the body last sent (JSON), so an unchanged share sends nothing. */
  private readonly sent = new Map<string, string>();
  private timer: NodeJS.Timeout | undefined;
  private running = false;
  private again = false;
  readonly stats = { passes: 0, puts: 0, statusWrites: 0, failures: 0 };

  constructor(
    private readonly o: {
      client: KubeClient;
      pools: Informer<PoolObj>;
      templates: Informer<TemplateObj>;
      fleet: Fleet;
      sandboxd: SandboxdClient;
      log: Logger;
      resyncMs?: number;
    },
  ) {
    const kick = () => this.schedule(20);
    for (const inf of [o.pools, o.templates] as Array<Informer<PoolObj | TemplateObj>>)
      inf.addHandler({ onAdd: kick, onUpdate: kick, onDelete: kick });
    o.fleet.onChange(kick);
  }

  /** Run passes until the signal aborts (the caller holds the leader lease). */
  async run(signal: AbortSignal): Promise<void> {
    this.schedule(0);
    const resync = setInterval(() => this.schedule(0), this.o.resyncMs ?? 5000);
    await new Promise<void>((r) =>
      signal.aborted ? r() : signal.addEventListener('abort', () => r(), { once: true }),
    );
    clearInterval(resync);
    if (this.timer) clearTimeout(this.timer);
  }

  private schedule(ms: number): void {
    if (this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.pass();
    }, ms);
  }

  /** One pass: desired shares → PUTs to the nodes whose share changed → status of every pool. */
  async pass(): Promise<void> {
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = true;
    try {
      this.stats.passes++;
      const desired = this.resolve();
      const nodes = this.o.fleet.nodeNames().filter((n) => this.o.fleet.isSynced(n));
      const byKey = new Map<string, Desired>();
      for (const d of desired.values()) {
        const k = poolKeyString(d.key);
        const prev = byKey.get(k);
        byKey.set(k, { key: d.key, replicas: (prev?.replicas ?? 0) + d.replicas });
      }
      const shares = new Map<string, Array<{ template: string; net: string; size: string; warm: number }>>();
      for (const node of nodes) shares.set(node, []);
      for (const d of byKey.values())
        for (const [node, warm] of spread(d.replicas, nodes))
          if (warm > 0) shares.get(node)!.push({ template: d.key.template, net: d.key.net, size: d.key.size, warm });
      await Promise.all(nodes.map((node) => this.send(node, shares.get(node)!)));
      await this.writeStatus(desired, nodes);
    } catch (err) {
      this.stats.failures++;
      this.o.log.warn({ err }, 'warm-pool driver pass failed; retrying at the next one');
    } finally {
      this.running = false;
      if (this.again) {
        this.again = false;
        this.schedule(0);
      }
    }
  }

  /** Each pool's key and replicas; a pool whose template cannot be resolved keeps what it had (never drained). */
  private resolve(): Map<string, Desired> {
    const out = new Map<string, Desired>();
    for (const pool of this.o.pools.list()) {
      const id = `${pool.metadata.namespace}/${pool.metadata.name}`;
      const tpl = this.o.templates.getByName(pool.metadata.namespace, pool.spec.sandboxTemplateRef.name);
      const key = tpl
        ? derivePoolKey({ annotations: tpl.metadata.annotations, podTemplate: tpl.spec.podTemplate })
        : undefined;
      if (key?.ok) {
        const d = { key: key.key, replicas: pool.spec.replicas ?? 1 };
        this.lastGood.set(id, d);
        out.set(id, d);
        continue;
      }
      const kept = this.lastGood.get(id);
      this.o.log.warn(
        { pool: id, template: pool.spec.sandboxTemplateRef.name, why: key && !key.ok ? key.message : 'not found' },
        kept
          ? "cannot resolve the template; keeping the pool's last targets"
          : 'cannot resolve the template; pool not driven yet',
      );
      if (kept) out.set(id, { key: kept.key, replicas: pool.spec.replicas ?? kept.replicas });
    }
    for (const id of [...this.lastGood.keys()]) if (!this.o.pools.get(id)) this.lastGood.delete(id);
    return out;
  }

  private async send(
    node: string,
    pools: Array<{ template: string; net: string; size: string; warm: number }>,
  ): Promise<void> {
    pools.sort((a, b) => `${a.template}|${a.net}|${a.size}`.localeCompare(`${b.template}|${b.net}|${b.size}`));
    const body = JSON.stringify({ pools });
    // Resend also when the node's own targets say it lost them (it restarted from an older state, say).
    const drifted = pools.some((p) => this.o.fleet.poolOn(node, p as PoolKeyOf).target !== p.warm);
    if (this.sent.get(node) === body && !drifted) return;
    const address = this.o.fleet.address(node);
    if (!address) return;
    await this.o.sandboxd.call(node, address, 'PUT', `/v1/pools?owner=${DRIVER_OWNER}`, { pools });
    this.sent.set(node, body);
    this.stats.puts++;
    this.o.log.info(
      { node, pools: pools.map((p) => `${describePoolKey(p as PoolKeyOf)}=${p.warm}`) },
      'node warm targets set',
    );
  }

  /**
   * replicas = what was asked of the nodes; readyReplicas = warm VMs they report for the key (shared among the
   * pools of one key in their order). Written only when it changed, with the marker the operator honours.
   */
  private async writeStatus(desired: Map<string, Desired>, nodes: string[]): Promise<void> {
    const left = new Map<string, number>();
    for (const d of desired.values()) {
      const k = poolKeyString(d.key);
      if (!left.has(k))
        left.set(
          k,
          nodes.reduce((n, node) => n + this.o.fleet.poolOn(node, d.key).warm, 0),
        );
    }
    for (const [id, d] of desired) {
      const pool = this.o.pools.get(id);
      if (!pool) continue;
      const k = poolKeyString(d.key);
      const asked = nodes.length ? d.replicas : 0;
      const ready = Math.min(asked, left.get(k) ?? 0);
      left.set(k, (left.get(k) ?? 0) - ready);
      const status = { replicas: asked, readyReplicas: ready, observedGeneration: pool.metadata.generation ?? 0 };
      const marked = pool.metadata.annotations?.[SERVED_BY_ANNOTATION] === SERVED_BY_VALUE;
      const same =
        pool.status?.replicas === status.replicas &&
        pool.status?.readyReplicas === status.readyReplicas &&
        pool.status?.observedGeneration === status.observedGeneration;
      const { namespace, name } = pool.metadata;
      if (!marked)
        await this.o.client.patch(
          SandboxWarmPools,
          namespace,
          name!,
          { metadata: { annotations: { [SERVED_BY_ANNOTATION]: SERVED_BY_VALUE } } },
          'merge',
        );
      if (same) continue;
      await this.o.client.patch(SandboxWarmPools, namespace, name!, { status }, 'merge', { subresource: 'status' });
      this.stats.statusWrites++;
    }
  }
}
