/**
 * envd's state per claimed sandbox on this node: its access token (derived from the claim's token), the
 * environment every command gets (the create's envVars, carried in the claim's object as the first container's
 * `env`), its processes and its polled watchers. Made on first use, dropped when the claim is released or its VM
 * pauses (the agent session that carried the streams is gone then).
 */
import { Code, ConnectError } from '@connectrpc/connect';
import { envdAccessToken, trafficAccessToken } from '../../api/envd.js';
import { E2B_PUBLIC_TRAFFIC_ANNOTATION } from '../../api/keys.js';
import type { AgentClient } from '../../guest/index.js';
import type { NodeEngine, SandboxRecord } from '../engine.js';
import { ProcessTable } from './processes.js';
import type { Watchers } from './watchers.js';

export class SandboxContext {
  readonly processes = new ProcessTable();
  watchers: Watchers | undefined;
  readonly envdToken: string;
  /** What `E2B-Traffic-Access-Token` must be for the sandbox's other ports (access.ts mayReachPort). */
  readonly trafficToken: string;
  /** Created through the e2b API with public traffic: its other ports need no token. */
  readonly publicTraffic: boolean;
  readonly env: Record<string, string>;

  constructor(
    private readonly engine: NodeEngine,
    readonly record: SandboxRecord,
  ) {
    this.envdToken = envdAccessToken(record.token);
    this.trafficToken = trafficAccessToken(this.envdToken);
    this.publicTraffic = objectAnnotation(record.object, E2B_PUBLIC_TRAFFIC_ANNOTATION) === 'true';
    this.env = objectEnv(record.object);
  }

  get id(): string {
    return this.record.id;
  }

  /** The agent of the running VM; a paused sandbox is `unavailable` (resume it through the API first). */
  agent(): AgentClient {
    if (this.record.hibernated || this.record.paused)
      throw new ConnectError(`sandbox ${this.id} is paused; resume it (Sandbox.connect) first`, Code.Unavailable);
    return this.engine.vm(this.id).agent;
  }

  close(reason: string): void {
    this.processes.detachAll(reason);
    this.watchers?.closeAll();
  }
}

/** An annotation of a claim's object (sandbox-apiserver's creates carry their Sandbox). */
export function objectAnnotation(object: unknown, key: string): string | undefined {
  const annotations = (object as { metadata?: { annotations?: unknown } } | undefined)?.metadata?.annotations;
  if (typeof annotations !== 'object' || annotations === null) return undefined;
  const v = (annotations as Record<string, unknown>)[key];
  return typeof v === 'string' ? v : undefined;
}

/** `spec.podTemplate.spec.containers[0].env` (name/value pairs) of a claim's object, as a map. */
export function objectEnv(object: unknown): Record<string, string> {
  const containers = (object as { spec?: { podTemplate?: { spec?: { containers?: unknown } } } } | undefined)?.spec
    ?.podTemplate?.spec?.containers;
  const first = Array.isArray(containers) ? (containers[0] as { env?: unknown } | undefined) : undefined;
  const out: Record<string, string> = {};
  if (!Array.isArray(first?.env)) return out;
  for (const e of first.env as Array<{ name?: unknown; value?: unknown }>)
    if (typeof e?.name === 'string' && typeof e.value === 'string') out[e.name] = e.value;
  return out;
}

/** The contexts of this node's sandboxes, by claim id. */
export class SandboxContexts {
  private readonly byId = new Map<string, SandboxContext>();

  constructor(private readonly engine: NodeEngine) {
    engine.on('released', (rec: SandboxRecord) => this.drop(rec.id, `sandbox ${rec.id} was released`));
    engine.on('changed', (rec: SandboxRecord) => {
      if (rec.hibernated) this.drop(rec.id, `sandbox ${rec.id} was paused`);
    });
  }

  /** The context of claim `id`, or undefined when this node has no such claim. */
  get(id: string): SandboxContext | undefined {
    const rec = this.engine.get(id);
    if (!rec) return undefined;
    let ctx = this.byId.get(id);
    if (!ctx || ctx.record !== rec) {
      ctx = new SandboxContext(this.engine, rec);
      this.byId.set(id, ctx);
    }
    return ctx;
  }

  private drop(id: string, reason: string): void {
    this.byId.get(id)?.close(reason);
    this.byId.delete(id);
  }

  closeAll(): void {
    for (const [id] of this.byId) this.drop(id, 'the data plane is shutting down');
  }
}
