/**
 * Which engine claims the virtual kubelet made for which Pods. The engine also holds claims made through the
 * sandboxd HTTP API (L2/L3 claims whose claimRef is a SandboxClaim, not a Pod); only claims listed here are ever
 * released by the pod lifecycle, so an orphan sweep can never touch a claim it does not own. Persisted (0600,
 * tmp + rename) before a Pod is reported Running, as vk-sandbox persists its claims table (docs/runtime-adapter.md).
 */
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import type { VirtualNodeKind } from './types.js';

export interface PodClaim {
  /** `<namespace>/<name>`, also the engine claimRef. */
  pod: string;
  uid: string;
  node: string;
  kind: VirtualNodeKind;
  claimId: string;
  vmId: string;
  deadline: string;
  /** VMs this Pod has had before the current one (the containers' restartCount). */
  restartCount: number;
  boundAt: string;
}

export class ClaimTable {
  private readonly rows = new Map<string, PodClaim>();

  constructor(private readonly path: string) {
    mkdirSync(dirname(path), { recursive: true });
    try {
      const saved = JSON.parse(readFileSync(path, 'utf8')) as { claims?: PodClaim[] };
      for (const c of saved.claims ?? []) this.rows.set(c.pod, c);
    } catch {
      // first start, or an unreadable file: start empty (the engine still holds the claims; pods re-adopt by ref)
    }
  }

  get(pod: string): PodClaim | undefined {
    return this.rows.get(pod);
  }

  list(): PodClaim[] {
    return [...this.rows.values()];
  }

  set(row: PodClaim): void {
    this.rows.set(row.pod, row);
    this.flush();
  }

  delete(pod: string): void {
    if (this.rows.delete(pod)) this.flush();
  }

  private flush(): void {
    const tmp = `${this.path}.tmp`;
    writeFileSync(tmp, JSON.stringify({ claims: this.list() }), { mode: 0o600 });
    renameSync(tmp, this.path);
  }
}
