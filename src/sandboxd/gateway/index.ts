/**
 * The claim gateway with Kubernetes identity (L2, docs/claim-gateway.md): on the claim
 * listener, a caller that presents a Kubernetes bearer token (not one of sandboxd's own) claims a warm VM for a
 * SandboxClaim in a namespace where RBAC lets it create SandboxClaims. The answer is the node-local claim's, at
 * once: TokenReview and SubjectAccessReview verdicts are cached (identity.ts), the pool key comes from informers
 * (pools.ts), and the SandboxClaim is written afterwards (recorder.ts); orphan adoption (adoption.ts) records
 * what could not be recorded and releases what lost its claim.
 */
import { join } from 'node:path';
import { SandboxError } from '../../errors.js';
import { describePoolKey, poolKeyString, type PoolKeyOf } from '../../api/pool-key.js';
import type { EventRecorder, KubeClient } from '../../kube/index.js';
import { AGENTS_GROUP, HUB_VERSION, idleSecondsAnnotation } from '../../api/index.js';
import type { Logger } from '../../log/logger.js';
import type { Answer } from '../claim-gateway.js';
import type { NodeEngine } from '../engine.js';
import { errorStatus, MAX_BODY_BYTES, parseJsonBody, type SandboxdApi } from '../http-api.js';
import { OrphanAdoption } from './adoption.js';
import { KubeIdentity, type Refusal } from './identity.js';
import { DeliveryLedger } from './ledger.js';
import { PoolResolver } from './pools.js';
import { ClaimRecorder } from './recorder.js';
import { deliveryFact, parseKubeClaim, sandboxObject, type KubeClaimRequest } from './request.js';

export { DELIVERED_BY } from './request.js';

export interface KubeGatewayOptions {
  api: SandboxdApi;
  engine: NodeEngine;
  client: KubeClient;
  dataDir: string;
  log: Logger;
  /** Verdict cache TTL (ms; default 10 s). */
  authCacheTtlMs?: number;
  /** How long an expired verdict is used while kube-apiserver does not answer (ms; default 60 s). */
  authStaleMs?: number;
  /** Orphan adoption cadence (ms; default 10 s). */
  adoptionIntervalMs?: number;
  /** Records SandboxClaimed on each delivered Sandbox (docs/claim-gateway.md "Record"); none when absent. */
  events?: EventRecorder;
}

interface ClaimAnswer {
  id: string;
  token: string;
  deadline: string;
  owner_addr: string;
}

/** `v` through `f`, without a promise when `v` is not one: the warm path answers in the tick it was asked. */
function then<T, U>(v: T | Promise<T>, f: (t: T) => U | Promise<U>): U | Promise<U> {
  return v instanceof Promise ? v.then(f) : f(v);
}

const hostOf = (addr: string) => {
  const i = addr.lastIndexOf(':');
  return i > 0 ? addr.slice(0, i).replace(/^\[|\]$/g, '') : addr;
};

export class KubeClaimGateway {
  readonly identity: KubeIdentity;
  readonly pools: PoolResolver;
  readonly recorder: ClaimRecorder;
  readonly adoption: OrphanAdoption;
  readonly ledger: DeliveryLedger;
  private readonly log: Logger;

  constructor(private readonly o: KubeGatewayOptions) {
    this.log = o.log;
    // Reviews on a client of their own, unthrottled: a claim never queues behind records or informers.
    this.identity = new KubeIdentity({
      client: o.client.derive({ qps: -1, timeoutMs: 5000 }),
      cacheTtlMs: o.authCacheTtlMs ?? 10_000,
      staleMs: o.authStaleMs ?? 60_000,
    });
    this.pools = new PoolResolver(o.client, o.log);
    this.ledger = new DeliveryLedger(join(o.dataDir, 'claim-gateway.json'), o.log);
    this.ledger.load();
    const node = o.engine.nodeName;
    this.recorder = new ClaimRecorder({
      client: o.client,
      node,
      host: hostOf(o.engine.advertiseAddr),
      ledger: this.ledger,
      log: o.log,
    });
    this.adoption = new OrphanAdoption({
      engine: o.engine,
      client: o.client,
      recorder: this.recorder,
      ledger: this.ledger,
      node,
      log: o.log,
      intervalMs: o.adoptionIntervalMs,
    });
  }

  /** Informers and orphan adoption, until `signal` aborts; then the ledger is written. */
  async run(signal: AbortSignal): Promise<void> {
    this.pools.start(signal);
    await this.adoption.run(signal);
    await this.ledger.flush();
  }

  /**
   * The answer to `POST /v1/claim` by bearer token `token` (not a sandboxd token): a promise (the claim is
   * answered once on disk); at once only for a refusal. Errors are answers (400, 401, 403, 404, 409, 413, 429, 503).
   */
  claim(
    token: string,
    chunks: readonly Buffer[],
    tooLarge: boolean,
    started: number,
    /** The caller's remote address: uncached tokens are reviewed within its budget (review-budget.ts). */
    source?: string,
  ): Answer | Promise<Answer> {
    try {
      const out = then(this.identity.authenticate(token, source), (who) => {
        if ('status' in who) return refused(who);
        if (tooLarge)
          throw new SandboxError('sandboxd.too-large', `invalid request body: larger than ${MAX_BODY_BYTES} bytes`);
        const req = parseKubeClaim(parseJsonBody(chunks));
        return then(this.identity.authorize(who, req.namespace), (ok) =>
          'status' in ok ? refused(ok) : this.deliver(ok.user.name, req, started),
        );
      });
      return out instanceof Promise ? out.catch((err: unknown) => this.failed(err)) : out;
    } catch (err) {
      return this.failed(err);
    }
  }

  private deliver(user: string, req: KubeClaimRequest, started: number): Answer | Promise<Answer> {
    const pool = this.pools.resolve(req.namespace, req.warmPool);
    if (!this.serves(pool.key))
      throw new SandboxError(
        'sandboxd.pool-not-served',
        `node ${this.o.engine.nodeName} serves no warm pool for SandboxWarmPool ${req.namespace}/${req.warmPool} (${describePoolKey(pool.key)})`,
        { hint: 'claim on a node that does, or wait for the warm-pool driver to fill it' },
      );
    // The template's idle policy, from its pod template (as the CRD layout's Pods carry it).
    const idle = idleSecondsAnnotation(pool.podTemplate?.metadata?.annotations);
    if (typeof idle === 'string')
      throw new SandboxError('sandboxd.bad-request', `SandboxTemplate ${req.namespace}/${pool.template}: ${idle}`);
    const body = {
      template: pool.key.template,
      net: pool.key.net,
      size: pool.key.size,
      ...(req.ttlSeconds ? { ttl_seconds: req.ttlSeconds } : {}),
      ...(idle ? { idle_hibernate_seconds: idle } : {}),
      claim_ref: `${req.namespace}/${req.name}`,
      no_redirect: true,
      object: sandboxObject(req, pool, user),
    };
    // The delivery is this node's fact (the record and orphan adoption act on it), not the object's annotations.
    const fact = deliveryFact(req, pool, user);
    const out = this.o.api.claimNow({ kind: 'tenant', name: `kubernetes:${user}` }, body, started, fact);
    const answered = (a: unknown): Answer => {
      const c = a as ClaimAnswer;
      // Queued, not sent: the recorder sends it after this tick, so the answer is not delayed by it.
      this.o.events?.recordFor(
        {
          apiVersion: `${AGENTS_GROUP}/${HUB_VERSION}`,
          kind: 'Sandbox',
          namespace: req.namespace,
          name: req.name,
          uid: body.object.metadata.uid,
        },
        {
          type: 'Normal',
          reason: 'SandboxClaimed',
          action: 'Claim',
          note: `Claimed by ${user} through the claim gateway of node ${this.o.engine.nodeName}: sandbox ${c.id} from SandboxWarmPool ${req.warmPool}`,
        },
      );
      this.recorder.enqueue({
        id: c.id,
        namespace: req.namespace,
        name: req.name,
        warmPool: req.warmPool,
        template: pool.template,
        user,
        claimedAtMs: Date.now(),
      });
      return {
        status: 200,
        body: {
          id: c.id,
          token: c.token,
          deadline: c.deadline,
          owner_addr: c.owner_addr,
          node: this.o.engine.nodeName,
          namespace: req.namespace,
          name: req.name,
        },
      };
    };
    return 'answer' in out ? answered(out.answer) : out.pending.then(answered);
  }

  /** Whether this node keeps a warm pool of `key` (a miss then clones one; a key it does not keep is a 503). */
  private serves(key: PoolKeyOf): boolean {
    if (this.o.engine.warmCount(key) > 0) return true;
    const k = poolKeyString(key);
    return this.o.engine.poolStatus().some((p) => p.target > 0 && poolKeyString(p.key) === k);
  }

  private failed(err: unknown): Answer {
    const { status, message } = errorStatus(err);
    if (status >= 500 && status !== 503) this.log.error({ err }, 'gateway claim failed');
    // a pool no node keeps here takes the warm-pool driver a while; anything else unavailable is a moment
    const retryAfter = err instanceof SandboxError && err.code === 'sandboxd.pool-not-served' ? 5 : 1;
    return { status, body: { error: message }, ...(status === 503 ? { retryAfter } : {}) };
  }
}

function refused(r: Refusal): Answer {
  const retryAfter = r.retryAfter ?? (r.status === 503 ? 1 : undefined);
  return { status: r.status, body: { error: r.message }, ...(retryAfter === undefined ? {} : { retryAfter }) };
}
