/**
 * Which Sandbox a claim is bound to. The binding lives on the Sandbox (controller ownerReference + `claim-uid`
 * label); this module finds it again: from this process's own writes, the Sandbox informer's controller-UID index,
 * and after a restart or a leader change from one consistent LIST, so a claim never gets a second Sandbox.
 */
import { AnnotationKeys, LabelKeys } from '../../api/index.js';
import { SandboxError } from '../../errors.js';
import { controllerOf, isControlledBy, isNotFound, keyOf, Sandboxes, SandboxClaims } from '../../kube/index.js';
import type { ClaimDeps } from './claim-context.js';
import { newest, type ClaimObj, type SandboxObj } from './support.js';

export const SANDBOX_BY_CONTROLLER_INDEX = 'ext:sandbox-by-controller-uid';
/**
 * Without leader election, how long a restarted operator leaves claims it found at startup (and that no Sandbox
 * names as controller) alone before binding them: a write the previous process sent just before it died may still
 * commit for a moment after (seen above 1 s on an overloaded machine). With leader election the lease hand-over
 * (leaseDuration, 15 s) is that wait.
 */
export const PREDECESSOR_SETTLE_MS = 5_000;

/** Not now, and nothing to report: the pass writes nothing and requeues after `requeueMs`. */
export class Deferred extends SandboxError {
  constructor(readonly requeueMs: number) {
    super('claim.deferred', 'deferred');
  }
}

export class ClaimBindings {
  /** claim UID -> the Sandbox we bound it to (our write's response), until the cache catches up. */
  private readonly bindings = new Map<string, SandboxObj>();
  /** `<namespace>/<name>` of a remembered Sandbox -> its claim's UID, so a Sandbox delete can drop the copy. */
  private readonly claimOf = new Map<string, string>();
  /**
   * Claims whose bound Sandbox the informer saw deleted: before binding one anew, the claim is read from the
   * apiserver (confirmClaim). Deleting a claim deletes its Sandbox (garbage collection), and that Sandbox's delete
   * event can arrive before the claim's own: from the cache alone the claim looks alive and unbound, and would take
   * another warm member for a claim that no longer exists.
   */
  private readonly unbound = new Set<string>();
  /** claim UID -> a candidate whose adoption outcome is unknown (transport error); checked with a GET first. */
  private readonly uncertain = new Map<string, string>();
  private fence: Promise<void> | undefined;
  /** Claims that existed before this process synced: a dead predecessor may have been binding them. */
  private readonly preexisting = new Set<string>();
  private readonly startedAt = Date.now();

  constructor(private readonly d: ClaimDeps) {
    d.sandboxes.addIndex(SANDBOX_BY_CONTROLLER_INDEX, (sb) => {
      const ref = controllerOf(sb);
      return ref?.kind === SandboxClaims.kind ? [ref.uid] : [];
    });
  }

  /** Called for every claim event: a claim seen before the claim cache synced may have a dead predecessor's write. */
  observeClaim(c: ClaimObj): void {
    if (!this.d.claims.hasSynced && !this.d.config.leaderElect && !c.status?.sandbox?.name)
      this.preexisting.add(c.metadata.uid!);
  }

  /** Our write bound (or re-wrote) the claim's Sandbox: this response is the freshest view until the cache has it. */
  remember(claimUid: string, sb: SandboxObj): void {
    const prev = this.bindings.get(claimUid);
    if (prev && this.claimOf.get(keyOf(prev)) === claimUid) this.claimOf.delete(keyOf(prev));
    this.bindings.set(claimUid, sb);
    this.claimOf.set(keyOf(sb), claimUid);
  }

  /**
   * The informer saw a Sandbox deleted. A remembered copy of that very object (same UID) is stale from now on: kept,
   * it would outlive the cache's copy and keep the claim bound (and Ready) to a Sandbox that no longer exists
   * (docs/claim-model.md "The pass", step 4). A copy of a newer object under the same name stays.
   */
  sandboxDeleted(sb: SandboxObj): void {
    const key = keyOf(sb);
    const uid = this.claimOf.get(key);
    if (uid === undefined) return;
    const mine = this.bindings.get(uid);
    if (mine && keyOf(mine) === key && mine.metadata.uid !== sb.metadata.uid) return;
    this.claimOf.delete(key);
    if (mine && keyOf(mine) === key) {
      this.bindings.delete(uid);
      this.unbound.add(uid);
    }
  }

  /**
   * Whether the claim may go on to be bound: false when its bound Sandbox was deleted and the apiserver no longer
   * has this claim (deleted, or deleting), so the pass must stop. One GET, only after such a delete.
   */
  async confirmClaim(claim: ClaimObj): Promise<boolean> {
    const uid = claim.metadata.uid!;
    if (!this.unbound.has(uid)) return true;
    let live: ClaimObj | undefined;
    try {
      live = await this.d.manager.client.get<ClaimObj>(SandboxClaims, claim.metadata.namespace, claim.metadata.name!);
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
    if (!live || live.metadata.uid !== uid || live.metadata.deletionTimestamp) return false;
    this.unbound.delete(uid);
    return true;
  }

  /** An adoption of `sandboxName` whose outcome is unknown: the next lookup asks the apiserver first. */
  uncertainAdoption(claimUid: string, sandboxName: string): void {
    this.uncertain.set(claimUid, sandboxName);
  }

  forget(claimUid: string): void {
    const mine = this.bindings.get(claimUid);
    if (mine && this.claimOf.get(keyOf(mine)) === claimUid) this.claimOf.delete(keyOf(mine));
    this.bindings.delete(claimUid);
    this.unbound.delete(claimUid);
    this.uncertain.delete(claimUid);
    this.preexisting.delete(claimUid);
  }

  /**
   * With leader election, caches synced before this process became leader may lag the previous leader's last
   * writes. One consistent LIST of Sandboxes, before the first pass, closes that gap for the binding lookups.
   */
  async fenceOnce(): Promise<void> {
    if (!this.d.config.leaderElect) return;
    this.fence ??= (async () => {
      const list = await this.d.manager.client.list<SandboxObj>(Sandboxes, this.d.config.watchNamespace);
      for (const sb of list.items) {
        const ref = controllerOf(sb);
        if (ref?.kind === SandboxClaims.kind) {
          const have = this.bindings.get(ref.uid);
          if (!have || have.metadata.name === sb.metadata.name) this.remember(ref.uid, newest(have, sb) ?? sb);
        }
      }
    })();
    await this.fence;
  }

  /** The freshest view of a Sandbox: the cache's or our last write's. */
  view(namespace: string, name: string, claimUid: string): SandboxObj | undefined {
    const cached = this.d.sandboxes.getByName(namespace, name);
    const mine = this.bindings.get(claimUid);
    return newest(cached, mine?.metadata.name === name ? mine : undefined);
  }

  /**
   * A Sandbox that already names this claim its controller, if any (docs/claim-model.md "The pass", step 4.1, by
   * ownership).
   */
  async bound(claim: ClaimObj): Promise<SandboxObj | undefined> {
    const ns = claim.metadata.namespace!;
    const uid = claim.metadata.uid!;
    const owned = (sb: SandboxObj | undefined) =>
      sb && !sb.metadata.deletionTimestamp && isControlledBy(sb, claim) ? sb : undefined;
    const pending = this.uncertain.get(uid);
    if (pending !== undefined) {
      let fresh: SandboxObj | undefined;
      try {
        fresh = await this.d.manager.client.get<SandboxObj>(Sandboxes, ns, pending);
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
      this.uncertain.delete(uid);
      if (fresh && isControlledBy(fresh, claim)) this.remember(uid, fresh);
    }
    const statusName = claim.status?.sandbox?.name;
    const byStatus = statusName ? owned(this.view(ns, statusName, uid)) : undefined;
    if (byStatus) return byStatus;
    const mine = this.bindings.get(uid);
    if (mine) {
      const view = owned(this.view(ns, mine.metadata.name!, uid));
      if (view) return view;
    }
    const indexed = this.d.sandboxes.byIndex(SANDBOX_BY_CONTROLLER_INDEX, uid).filter((sb) => owned(sb));
    if (indexed.length > 1)
      this.d.log.error({ claim: keyOf(claim), sandboxes: indexed.map(keyOf) }, 'claim controls more than one Sandbox');
    if (indexed.length)
      return indexed.sort((a, b) =>
        (a.metadata.creationTimestamp ?? '').localeCompare(b.metadata.creationTimestamp ?? ''),
      )[0];
    const annotated = claim.metadata.annotations?.[AnnotationKeys.sandboxName];
    if (annotated) {
      const sb = owned(this.view(ns, annotated, uid));
      if (sb) return sb;
    }
    return undefined;
  }

  /**
   * A claim this process found at startup with no Sandbox naming it controller: after the settle window, one
   * consistent LIST by the `claim-uid` label (which every adoption and cold create sets) decides, so a binding the
   * previous process committed late is found instead of a second Sandbox being bound.
   */
  async recoverFromPredecessor(claim: ClaimObj): Promise<SandboxObj | undefined> {
    const uid = claim.metadata.uid!;
    if (!this.preexisting.has(uid)) return undefined;
    const wait = this.startedAt + PREDECESSOR_SETTLE_MS - Date.now();
    if (wait > 0) throw new Deferred(wait);
    const list = await this.d.manager.client.list<SandboxObj>(Sandboxes, claim.metadata.namespace, {
      labelSelector: `${LabelKeys.claimUid}=${uid}`,
    });
    this.preexisting.delete(uid);
    const found = list.items.find((sb) => isControlledBy(sb, claim) && !sb.metadata.deletionTimestamp);
    if (found) this.remember(uid, found);
    return found;
  }
}
