/**
 * Which deliveries have been recorded, and for which SandboxClaim (by UID): `<data-dir>/claim-gateway.json`,
 * 0600, written off the claim path (coalesced, tmp + rename, as the claim table). It is what tells orphan adoption,
 * also after a restart, the two cases a missing claim can be apart: a delivery never recorded (kube-apiserver was
 * down) is recorded now; one recorded for a claim that is gone since (deleted, or deleted and made again) is
 * released. Without it the second looks like the first, and a deleted claim would be brought back.
 */
import type { Logger } from '../../log/logger.js';
import { readJsonFile, StateFile } from '../state-file.js';

interface Saved {
  /** sandbox id -> the UID of the SandboxClaim it was recorded for. */
  recorded: Record<string, string>;
}

export class DeliveryLedger {
  private readonly recorded = new Map<string, string>();
  private readonly file: StateFile;

  constructor(
    private readonly path: string,
    log: Logger,
  ) {
    this.file = new StateFile(path, () => JSON.stringify({ recorded: Object.fromEntries(this.recorded) }), log);
  }

  /** Read what a previous run recorded; no file is an empty ledger, an unreadable one an error. */
  load(): void {
    const saved = readJsonFile<Partial<Saved>>(
      this.path,
      'move it aside: the gateway then records every delivery again (claims deleted meanwhile come back)',
    );
    for (const [id, uid] of Object.entries(saved?.recorded ?? {}))
      if (typeof uid === 'string') this.recorded.set(id, uid);
  }

  claimUid(id: string): string | undefined {
    return this.recorded.get(id);
  }

  /** Sandbox ids recorded for the claim with this UID. */
  idsFor(uid: string): string[] {
    const out: string[] = [];
    for (const [id, u] of this.recorded) if (u === uid) out.push(id);
    return out;
  }

  set(id: string, uid: string): void {
    if (this.recorded.get(id) === uid) return;
    this.recorded.set(id, uid);
    this.file.schedule();
  }

  delete(id: string): void {
    if (this.recorded.delete(id)) this.file.schedule();
  }

  /** Drop ids the node no longer holds (released while the daemon was down). */
  retain(live: (id: string) => boolean): void {
    for (const id of [...this.recorded.keys()]) if (!live(id)) this.delete(id);
  }

  flush(): Promise<void> {
    return this.file.flush();
  }
}
