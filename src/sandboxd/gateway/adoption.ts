/**
 * Orphan adoption (docs/claim-gateway.md "Adoption and release"): at start, every interval,
 * and whenever a claim this node bound disappears, the node's gateway deliveries (read from its own claim table,
 * so a restart loses none) are set against Kubernetes:
 * - a delivery never recorded (kube-apiserver was down or slow) is recorded now — its claim created if missing;
 * - a delivery recorded for a claim that is gone (NotFound, being deleted, or a new claim of the same name) is
 *   released: deleting the SandboxClaim releases the VM;
 * - anything else is left alone.
 * A VM is released only on kube-apiserver's own word that its claim is gone — a GET of that claim by name, checked
 * against the UID the record wrote down (ledger.ts) — never on a cache, a watch event or an error, so a VM with a
 * live claim is never destroyed. Claims are watched by the label the record puts on them (this node's only).
 */
import type { SandboxClaim } from '../../api/index.js';
import type { ObjectMeta } from '../../api/meta.js';
import { CocoonAnnotationKeys } from '../../api/index.js';
import { errorMessage } from '../../errors.js';
import { Informer, isNotFound, keyOf, SandboxClaims, type KubeClient } from '../../kube/index.js';
import type { Logger } from '../../log/logger.js';
import type { NodeEngine, SandboxRecord } from '../engine.js';
import type { DeliveryLedger } from './ledger.js';
import type { ClaimRecorder } from './recorder.js';
import { deliveryOf } from './request.js';

type ClaimObj = SandboxClaim & { metadata: ObjectMeta };

export interface AdoptionOptions {
  engine: NodeEngine;
  client: KubeClient;
  recorder: ClaimRecorder;
  ledger: DeliveryLedger;
  node: string;
  log: Logger;
  intervalMs?: number;
  timeoutMs?: number;
}

export interface PassResult {
  /** Deliveries handed to the recorder (not recorded yet). */
  adopted: number;
  /** VMs released because their claim is gone. */
  released: number;
  /** Set when the pass stopped early: kube-apiserver did not answer. */
  aborted?: string;
}

export class OrphanAdoption {
  readonly claims: Informer<ClaimObj>;
  /** Sandboxes this reconciler is releasing (their claim is gone: no "gone" status to write). */
  private readonly releasing = new Set<string>();
  private passing: Promise<PassResult> | undefined;
  readonly stats = { passes: 0, adopted: 0, released: 0, aborted: 0 };

  constructor(private readonly o: AdoptionOptions) {
    this.claims = new Informer<ClaimObj>(o.client, SandboxClaims, {
      labelSelector: `${CocoonAnnotationKeys.gatewayNode}=${o.node}`,
      logger: o.log,
    });
    this.claims.addHandler({ onDelete: (c) => this.claimGone(c) });
    o.engine.on('released', (rec: SandboxRecord) => this.released(rec));
  }

  async run(signal: AbortSignal): Promise<void> {
    this.o.ledger.retain((id) => this.o.engine.get(id) !== undefined);
    void this.claims.start(signal);
    void this.pass();
    const timer = setInterval(() => void this.pass(), this.o.intervalMs ?? 10_000);
    await new Promise<void>((r) => (signal.aborted ? r() : signal.addEventListener('abort', () => r())));
    clearInterval(timer);
  }

  /** One pass over the node's deliveries (one at a time; a pass asked for during one shares it). */
  pass(): Promise<PassResult> {
    this.passing ??= this.runPass().finally(() => (this.passing = undefined));
    return this.passing;
  }

  private async runPass(): Promise<PassResult> {
    this.stats.passes++;
    const out: PassResult = { adopted: 0, released: 0 };
    for (const rec of this.o.engine.list()) {
      const d = deliveryOf(rec);
      if (!d || this.o.recorder.busy(d.id) || this.releasing.has(d.id)) continue;
      const uid = this.o.ledger.claimUid(d.id);
      if (uid === undefined) {
        this.o.recorder.enqueue(d);
        out.adopted++;
        continue;
      }
      const cached = this.claims.hasSynced ? this.claims.get(`${d.namespace}/${d.name}`) : undefined;
      if (cached?.metadata.uid === uid && !cached.metadata.deletionTimestamp) continue;
      try {
        if (await this.releaseIfGone(rec.id, d.namespace, d.name, uid)) out.released++;
      } catch (err) {
        out.aborted = errorMessage(err);
        this.stats.aborted++;
        this.o.log.warn({ err }, 'orphan adoption pass stopped: kube-apiserver did not answer; next pass retries');
        break;
      }
    }
    this.stats.adopted += out.adopted;
    this.stats.released += out.released;
    if (out.adopted || out.released) this.o.log.info(out, 'orphan adoption pass');
    return out;
  }

  /** A watched claim disappeared (deleted, or its label removed): release what was recorded for it, if it is gone. */
  private claimGone(c: ClaimObj): void {
    for (const id of this.o.ledger.idsFor(c.metadata.uid!)) {
      if (this.releasing.has(id)) continue;
      this.releaseIfGone(id, c.metadata.namespace!, c.metadata.name!, c.metadata.uid!).catch((err: unknown) =>
        this.o.log.warn({ err, claim: keyOf(c) }, 'checking a deleted claim failed; the next adoption pass retries'),
      );
    }
  }

  /** Release sandbox `id` if kube-apiserver says its claim (by UID) is gone. Throws when it did not answer. */
  private async releaseIfGone(id: string, namespace: string, name: string, uid: string): Promise<boolean> {
    let why: string | undefined;
    try {
      const now = await this.o.client.get<ClaimObj>(SandboxClaims, namespace, name, undefined, {
        signal: AbortSignal.timeout(this.o.timeoutMs ?? 10_000),
      });
      if (now.metadata.uid !== uid) why = 'its claim was deleted and made again';
      else if (now.metadata.deletionTimestamp) why = 'its claim is being deleted';
    } catch (err) {
      if (!isNotFound(err)) throw err;
      why = 'its claim was deleted';
    }
    if (!why || !this.o.engine.get(id) || this.releasing.has(id)) return false;
    this.releasing.add(id);
    try {
      this.o.log.info({ sandbox: id, claim: `${namespace}/${name}` }, `releasing the sandbox: ${why}`);
      await this.o.engine.release(id);
      return true;
    } finally {
      this.releasing.delete(id);
    }
  }

  /** Any release of a recorded delivery: the ledger forgets it, and a claim still there is told it is gone. */
  private released(rec: SandboxRecord): void {
    const uid = this.o.ledger.claimUid(rec.id);
    if (uid === undefined) return;
    this.o.ledger.delete(rec.id);
    const d = deliveryOf(rec);
    if (!d || this.releasing.has(rec.id)) return;
    this.o.recorder.enqueueGone(d, uid, Date.parse(rec.deadline) <= Date.now() ? 'SandboxExpired' : 'SandboxMissing');
  }
}
