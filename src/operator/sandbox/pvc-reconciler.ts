/**
 * A Sandbox's PersistentVolumeClaims, one per volume claim template: created when missing, adopted when unowned and
 * adoptable, refused when someone else controls them. Never deleted by the controller.
 */
import { LabelKeys, SANDBOX_FIELD_OWNER, type PersistentVolumeClaimTemplate } from '../../api/index.js';
import { controllerOf, isAlreadyExists, PersistentVolumeClaims } from '../../kube/index.js';
import {
  buildPvc,
  cannotAdoptMessage,
  foreignOwnerMessage,
  isAdoptable,
  nameHashOf,
  pvcNameOf,
  sandboxOwnerRef,
} from './desired.js';
import { ChildReconciler, liveGet, refuse, type Pass } from './pass.js';
import type { PersistentVolumeClaim, SandboxObject } from './types.js';

export class PvcReconciler extends ChildReconciler<PersistentVolumeClaim> {
  /** Drop the read-your-writes entries of a Sandbox that is gone. */
  forget(sb: SandboxObject): void {
    for (const vct of sb.spec.volumeClaimTemplates ?? [])
      this.overlay.forget(`${sb.metadata.namespace}/${pvcNameOf(vct, sb.metadata.name ?? '')}`);
  }

  async reconcile(pass: Pass, vct: PersistentVolumeClaimTemplate): Promise<void> {
    const { sb } = pass;
    const name = pvcNameOf(vct, sb.metadata.name ?? '');
    const key = `${sb.metadata.namespace}/${name}`;
    let pvc = this.overlay.resolve(key, this.cache.get(key), { whenMissing: true });
    if (!pvc) {
      try {
        pvc = await this.client.create(PersistentVolumeClaims, buildPvc(sb, vct), {
          fieldManager: SANDBOX_FIELD_OWNER,
        });
        this.overlay.remember(key, pvc);
        pass.log.info({ pvc: name }, 'pvc created');
        return;
      } catch (err) {
        if (!isAlreadyExists(err)) {
          pass.errors.push(`create PVC "${name}": ${(err as Error).message}`);
          return;
        }
        pvc = await liveGet<PersistentVolumeClaim>(this.client, PersistentVolumeClaims, sb.metadata.namespace, name);
        if (!pvc) {
          pass.errors.push(`PVC "${name}" already exists but could not be read`);
          return;
        }
      }
    }
    const ref = controllerOf(pvc);
    if (ref?.uid === sb.metadata.uid) return;
    if (ref) {
      refuse(pass, foreignOwnerMessage('PVC', name, ref, sb.metadata.name ?? ''));
      return;
    }
    if (!isAdoptable(pvc.metadata.labels, sb.metadata.name ?? '')) {
      refuse(pass, cannotAdoptMessage('PVC', name));
      return;
    }
    // Guarded like the Pod's adoption: the ownerReferences list replaces the one read at this resourceVersion.
    const patch = {
      metadata: {
        resourceVersion: pvc.metadata.resourceVersion,
        ownerReferences: [...(pvc.metadata.ownerReferences ?? []), sandboxOwnerRef(sb)],
        labels: { [LabelKeys.sandboxNameHash]: nameHashOf(sb.metadata.name ?? '') },
      },
    };
    try {
      const adopted = await this.client.patch<PersistentVolumeClaim>(
        PersistentVolumeClaims,
        sb.metadata.namespace,
        name,
        patch,
        'merge',
        { fieldManager: SANDBOX_FIELD_OWNER },
      );
      this.overlay.remember(key, adopted);
      pass.log.info({ pvc: name }, 'pvc adopted');
    } catch (err) {
      pass.errors.push(`adopt PVC "${name}": ${(err as Error).message}`);
    }
  }
}
