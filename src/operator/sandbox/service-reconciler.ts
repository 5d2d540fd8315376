/**
 * A Sandbox's headless Service (`spec.service`): created when asked for, drift in label, selector and ports repaired,
 * deleted when `false`, adopted only when unowned, adoptable and headless, refused when someone else controls it.
 */
import { SANDBOX_FIELD_OWNER } from '../../api/index.js';
import { controllerOf, isAlreadyExists, isNotFound, keyOf, Services } from '../../kube/index.js';
import {
  buildService,
  cannotAdoptMessage,
  foreignOwnerMessage,
  isAdoptable,
  repairedService,
  serviceRepairPatch,
  sandboxOwnerRef,
} from './desired.js';
import { ChildReconciler, deleteChild, liveGet, refuse, type Pass } from './pass.js';
import type { SandboxObject, Service } from './types.js';

export interface ServiceOutcome {
  /** A Service serves the Sandbox (its name goes into the status). */
  inUse: boolean;
  /** Ready must account for it. */
  required: boolean;
  exists: boolean;
}

/** Longest DNS-1035 label, the bound on a Service's name. */
export const MAX_SERVICE_NAME = 63;
const DNS1035_LABEL = /^[a-z]([-a-z0-9]*[a-z0-9])?$/;

/**
 * Why a Sandbox's name cannot name its headless Service (a Service name is a DNS-1035 label; a Sandbox's name is a
 * DNS-1123 subdomain, up to 253 characters, dots and a leading digit allowed), or undefined when it can. Only an
 * edit fixes it, so the Sandbox reports it as Ready=False InvalidConfiguration and is not retried.
 */
export function serviceNameProblem(name: string): string | undefined {
  const what = `spec.service: the headless Service is named after the Sandbox, and "${name}"`;
  if (name.length > MAX_SERVICE_NAME)
    return `${what} (${name.length} characters) is too long for a Service name: must be no more than ${MAX_SERVICE_NAME} characters`;
  if (!DNS1035_LABEL.test(name))
    return `${what} is not a valid Service name: a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character`;
  return undefined;
}

export class ServiceReconciler extends ChildReconciler<Service> {
  /** Drop the read-your-writes entry of a Sandbox (by key) that is gone. */
  forget(sandboxKey: string): void {
    this.overlay.forget(sandboxKey);
  }

  cached(sb: SandboxObject): Service | undefined {
    const key = keyOf(sb);
    return this.overlay.resolve(key, this.cache.get(key), { whenMissing: true });
  }

  /**
   * docs/operator.md "What a reconcile does", step 5 (newer upstream: ports derived and reconciled when
   * spec.service=true). Returns whether a Service is in use, whether Ready must account for it, and whether it exists.
   */
  async reconcile(pass: Pass): Promise<ServiceOutcome> {
    const { sb } = pass;
    const mode = sb.spec.service;
    const name = sb.metadata.name ?? '';
    const key = keyOf(sb);
    let svc = this.cached(sb);
    const none = { inUse: false, required: mode === true, exists: false };

    if (!svc) {
      if (mode !== true) return none;
      pass.invalid = serviceNameProblem(name);
      if (pass.invalid) return none;
      try {
        svc = await this.client.create(Services, buildService(sb), { fieldManager: SANDBOX_FIELD_OWNER });
        this.overlay.remember(key, svc);
        pass.log.info({ service: name }, 'service created');
        return { inUse: true, required: true, exists: true };
      } catch (err) {
        if (!isAlreadyExists(err)) {
          pass.errors.push(`create service "${name}": ${(err as Error).message}`);
          return none;
        }
        svc = await liveGet<Service>(this.client, Services, sb.metadata.namespace, name);
        if (!svc) return none;
      }
    }

    const ref = controllerOf(svc);
    if (ref?.uid === sb.metadata.uid) {
      if (mode === false) {
        await deleteChild(this.client, pass, Services, svc, 'service');
        this.overlay.forget(key);
        return none;
      }
      await this.repairService(pass, svc);
      return { inUse: true, required: true, exists: true };
    }
    if (mode === false) return none;
    if (ref) {
      refuse(pass, foreignOwnerMessage('service', name, ref, name));
      return none;
    }
    if (mode !== true) return none; // unowned and not asked for: ignored, never adopted
    if (!isAdoptable(svc.metadata.labels, name)) {
      refuse(pass, cannotAdoptMessage('service', name));
      return none;
    }
    const clusterIP = svc.spec.clusterIP ?? '';
    if (clusterIP !== '' && clusterIP !== 'None') {
      refuse(pass, `cannot adopt service "${name}": ClusterIP is "${clusterIP}" (expected "None", field is immutable)`);
      return none;
    }
    const want = repairedService(svc, sb);
    const adopted: Service = {
      ...svc,
      metadata: {
        ...svc.metadata,
        labels: want.labels,
        ownerReferences: [...(svc.metadata.ownerReferences ?? []), sandboxOwnerRef(sb)],
      },
      spec: { ...svc.spec, selector: want.selector, ...(want.ports ? { ports: want.ports } : {}) },
    };
    try {
      const updated = await this.client.update(Services, adopted, { fieldManager: SANDBOX_FIELD_OWNER });
      this.overlay.remember(key, updated);
      pass.log.info({ service: name }, 'service adopted');
      return { inUse: true, required: true, exists: true };
    } catch (err) {
      pass.errors.push(`adopt service "${name}": ${(err as Error).message}`);
      return none;
    }
  }

  private async repairService(pass: Pass, svc: Service): Promise<void> {
    const diff = serviceRepairPatch(svc, pass.sb);
    if (!diff) return;
    try {
      const updated = await this.client.patch<Service>(
        Services,
        svc.metadata.namespace,
        svc.metadata.name ?? '',
        diff,
        'merge',
        {
          fieldManager: SANDBOX_FIELD_OWNER,
        },
      );
      this.overlay.remember(keyOf(svc), updated);
    } catch (err) {
      if (!isNotFound(err)) pass.errors.push(`repair service "${svc.metadata.name}": ${(err as Error).message}`);
    }
  }
}
