/**
 * The claim controller's writes to the claim itself: its status and its observability and binding annotations,
 * each one merge patch sent only when something differs, and our last write's response kept until the cache has it.
 */
import { AnnotationKeys, type SandboxClaimStatus } from '../../api/index.js';
import { mergePatch, SandboxClaims, type KubeClient } from '../../kube/index.js';
import type { ClaimBindings } from './claim-binding.js';
import type { Resolved } from './claim-context.js';
import { sameStatus } from '../../api/claim-status.js';
import { newest, type ClaimObj } from './support.js';

/** RFC3339 with nanoseconds and Go's trailing-zero trimming; the sub-millisecond part comes from hrtime. */
export function rfc3339Nano(): string {
  const ms = Date.now();
  const sub = Number(process.hrtime.bigint() % 1_000_000n) || 1;
  const base = new Date(ms).toISOString().slice(0, 19);
  const frac = `${String(ms % 1000).padStart(3, '0')}${String(sub).padStart(6, '0')}`.replace(/0+$/, '');
  return `${base}.${frac}Z`;
}

export class ClaimWrites {
  private readonly firstObserved = new Map<string, string>();
  /** claim UID -> our last write's response. */
  private readonly written = new Map<string, ClaimObj>();

  constructor(
    private readonly client: KubeClient,
    private readonly bindings: ClaimBindings,
  ) {}

  /** Called for every claim event: the first time this process saw a claim that has no first-observed annotation. */
  observeClaim(c: ClaimObj): void {
    const uid = c.metadata.uid!;
    if (!this.firstObserved.has(uid) && !c.metadata.annotations?.[AnnotationKeys.controllerFirstObservedAt])
      this.firstObserved.set(uid, rfc3339Nano());
  }

  /** The fresher of the cached claim and our last write's response. */
  latest(cached: ClaimObj): ClaimObj {
    return newest(cached, this.written.get(cached.metadata.uid!))!;
  }

  /** When this process first saw the claim, until the annotation recording it is written. */
  firstObservedAt(claimUid: string): string | undefined {
    return this.firstObserved.get(claimUid);
  }

  forget(claimUid: string): void {
    this.firstObserved.delete(claimUid);
    this.written.delete(claimUid);
  }

  async writeStatus(claim: ClaimObj, status: SandboxClaimStatus): Promise<ClaimObj | undefined> {
    if (sameStatus(claim.status, status)) return undefined;
    const patch = mergePatch(claim.status ?? {}, status);
    if (patch === undefined) return undefined;
    const out = await this.client.patch<ClaimObj>(
      SandboxClaims,
      claim.metadata.namespace,
      claim.metadata.name!,
      { status: patch },
      'merge',
      {
        subresource: 'status',
      },
    );
    this.written.set(claim.metadata.uid!, out);
    return out;
  }

  /** Whether the claim lacks an observability or binding annotation this pass would write. */
  annotationsPending(claim: ClaimObj, resolved: Resolved | undefined): boolean {
    return Object.keys(this.wantedAnnotations(claim, resolved)).length > 0;
  }

  /**
   * Persist the observability and binding annotations (one merge patch, only when something is missing); the
   * response, or undefined when nothing was written.
   */
  async writeAnnotations(claim: ClaimObj, resolved: Resolved | undefined): Promise<ClaimObj | undefined> {
    const want = this.wantedAnnotations(claim, resolved);
    if (!Object.keys(want).length) return undefined;
    const first = this.firstObserved.get(claim.metadata.uid!);
    const out = await this.client.patch<ClaimObj>(
      SandboxClaims,
      claim.metadata.namespace,
      claim.metadata.name!,
      { metadata: { annotations: want } },
      'merge',
    );
    this.written.set(claim.metadata.uid!, out);
    if (first) this.firstObserved.delete(claim.metadata.uid!);
    return out;
  }

  private wantedAnnotations(claim: ClaimObj, resolved: Resolved | undefined): Record<string, string | null> {
    const have = claim.metadata.annotations ?? {};
    const want: Record<string, string | null> = {};
    const first = this.firstObserved.get(claim.metadata.uid!);
    if (!have[AnnotationKeys.controllerFirstObservedAt] && first)
      want[AnnotationKeys.controllerFirstObservedAt] = first;
    if (resolved) {
      const name = resolved.sandbox.metadata.name!;
      if (have[AnnotationKeys.sandboxName] !== name) want[AnnotationKeys.sandboxName] = name;
      if (resolved.template && have[AnnotationKeys.sandboxTemplateRef] !== resolved.template)
        want[AnnotationKeys.sandboxTemplateRef] = resolved.template;
    } else {
      const recorded = have[AnnotationKeys.sandboxName];
      if (recorded && !this.bindings.view(claim.metadata.namespace!, recorded, claim.metadata.uid!))
        want[AnnotationKeys.sandboxName] = null;
    }
    return want;
  }
}
