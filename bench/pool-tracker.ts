/**
 * The bench's view of one namespace's Sandboxes and Pods from its own watches (started on the empty namespace, so
 * the counts are exact): how many there are and how many Sandboxes are Ready, unclaimed warm pool members. A pool's status can lag its members (the pool writes it after a refill settles), so
 * "refilled" is read from the members themselves.
 */
import { controllerOf } from '../src/kube/index.js';
import { isSandboxReady, type SandboxObj } from '../src/operator/extensions/support.js';

export class PoolTracker {
  private readonly all = new Map<string, SandboxObj>();
  private readonly pods = new Set<string>();
  private readonly members = new Set<string>();
  private readonly readyMembers = new Set<string>();
  private readonly waiters = new Set<() => void>();

  onSandbox = (type: string, sb: SandboxObj): void => {
    const name = sb.metadata.name!;
    if (type === 'DELETED') {
      this.all.delete(name);
      this.members.delete(name);
      this.readyMembers.delete(name);
    } else {
      this.all.set(name, sb);
      const member = controllerOf(sb)?.kind === 'SandboxWarmPool' && !sb.metadata.deletionTimestamp;
      if (member) this.members.add(name);
      else this.members.delete(name);
      if (member && isSandboxReady(sb)) this.readyMembers.add(name);
      else this.readyMembers.delete(name);
    }
    for (const w of this.waiters) w();
  };

  /** Pod events of the same namespace (counted only: a Pod is gone once its DELETED event arrived). */
  onPod = (type: string, pod: { metadata: { name?: string } }): void => {
    if (type === 'DELETED') this.pods.delete(pod.metadata.name!);
    else this.pods.add(pod.metadata.name!);
    for (const w of this.waiters) w();
  };

  /** Resolves once the pool has exactly `size` members, all Ready, or rejects after `timeoutMs`. */
  waitFull(size: number, timeoutMs: number): Promise<void> {
    return this.until(
      () => this.readyMembers.size === size && this.members.size === size,
      timeoutMs,
      () => `pool: ${this.readyMembers.size}/${size} Ready members of ${this.members.size}`,
    );
  }

  /** Resolves once exactly `size` Sandboxes and `size` Pods exist (the claimed ones deleted and gone). */
  waitQuiet(size: number, timeoutMs: number): Promise<void> {
    return this.until(
      () => this.all.size === size && this.pods.size === size,
      timeoutMs,
      () => `${this.all.size} Sandboxes and ${this.pods.size} Pods, want ${size}`,
    );
  }

  private until(ok: () => boolean, timeoutMs: number, what: () => string): Promise<void> {
    if (ok()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const check = () => {
        if (!ok()) return;
        clearTimeout(timer);
        this.waiters.delete(check);
        resolve();
      };
      const timer = setTimeout(() => {
        this.waiters.delete(check);
        reject(new Error(`timed out after ${timeoutMs} ms: ${what()}`));
      }, timeoutMs);
      this.waiters.add(check);
    });
  }
}
