/**
 * One reconcile pass of a Sandbox as its child steps (PVCs, Pod, Service) see it, what each child step holds, and
 * the two child operations they all use: a live GET for an object the filtered caches cannot see, and a UID-guarded
 * delete.
 */
import { isNotFound, type Informer, type KubeClient, type ResourceType } from '../../kube/index.js';
import type { Logger } from '../../log/logger.js';
import { Overlay } from './overlay.js';
import type { PersistentVolumeClaim, Pod, SandboxObject, Service } from './types.js';

/** One reconcile pass: the Sandbox (freshest known copy) and the errors its children produced. */
export interface Pass {
  sb: SandboxObject;
  /** Every child error of the pass, in order (they all go into the Ready message). */
  errors: string[];
  /** How many of them are refusals (ownership, adoption, runtime conflicts) that retrying cannot fix. */
  refusals: number;
  /**
   * The Sandbox asks for something its own spec or name makes impossible (the Ready message, reason
   * InvalidConfiguration): terminal, so not an error (no retry; an edit of the Sandbox triggers the next pass).
   */
  invalid?: string;
  /** Set when a write of the pass was held back for claims: look again after this long. */
  heldMs?: number;
  log: Logger;
}

/** A refusal: reported like any error, but re-checked on a slow timer instead of a hot backoff. */
export function refuse(pass: Pass, message: string): void {
  pass.errors.push(message);
  pass.refusals++;
}

/** A child kind's reconciler: the client, the kind's filtered cache and the objects it wrote (read-your-writes). */
export abstract class ChildReconciler<T extends Pod | Service | PersistentVolumeClaim> {
  protected readonly overlay = new Overlay<T>();

  constructor(
    protected readonly client: KubeClient,
    protected readonly cache: Informer<T>,
  ) {}
}

export async function liveGet<T extends Pod | Service | PersistentVolumeClaim>(
  client: KubeClient,
  rt: ResourceType,
  namespace: string | undefined,
  name: string,
): Promise<T | undefined> {
  try {
    return await client.get<T>(rt, namespace, name);
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
}

export async function deleteChild(
  client: KubeClient,
  pass: Pass,
  rt: ResourceType,
  obj: Pod | Service,
  what: string,
): Promise<void> {
  if (obj.metadata.deletionTimestamp) return;
  try {
    await client.delete(rt, obj.metadata.namespace, obj.metadata.name ?? '', {
      preconditions: { uid: obj.metadata.uid },
    });
    pass.log.info({ [what]: obj.metadata.name }, `${what} deleted`);
  } catch (err) {
    if (!isNotFound(err)) pass.errors.push(`delete ${what} "${obj.metadata.name}": ${(err as Error).message}`);
  }
}
