/**
 * A {@link WebhookCertStore} in memory, for the webhook's certificate logic without a cluster: records CRD
 * patches, guards Secret updates by resourceVersion, and can lose one create race to another process.
 */
import {
  generateBundle,
  type CrdConversionState,
  type StoredSecret,
  type WebhookCertStore,
} from '../../src/operator/webhook/index.js';

export class MemoryStore implements WebhookCertStore {
  secrets = new Map<string, StoredSecret>();
  crds = new Map<string, CrdConversionState>();
  patches: [string, Record<string, unknown>][] = [];
  raceOnce = false;
  private rv = 0;
  async getSecret(ns: string, name: string) {
    return this.secrets.get(`${ns}/${name}`);
  }
  async createSecret(ns: string, name: string, data: Record<string, string>) {
    if (this.raceOnce) {
      this.raceOnce = false;
      // Someone else wins the race with their own certificates.
      const theirs = generateBundle({ serviceName: 'svc', namespace: ns, clusterDomain: 'cluster.local' });
      this.secrets.set(`${ns}/${name}`, {
        data: { 'ca.crt': theirs.caPem, 'tls.crt': theirs.certPem, 'tls.key': theirs.keyPem },
        resourceVersion: String(++this.rv),
      });
      return 'exists' as const;
    }
    if (this.secrets.has(`${ns}/${name}`)) return 'exists' as const;
    this.secrets.set(`${ns}/${name}`, { data, resourceVersion: String(++this.rv) });
    return 'created' as const;
  }
  async updateSecret(ns: string, name: string, data: Record<string, string>, rv: string | undefined) {
    if (this.secrets.get(`${ns}/${name}`)?.resourceVersion !== rv) return 'conflict' as const;
    this.secrets.set(`${ns}/${name}`, { data, resourceVersion: String(++this.rv) });
    return 'updated' as const;
  }
  async getCrdConversion(name: string) {
    return this.crds.get(name);
  }
  async mergePatchCrd(name: string, patch: Record<string, unknown>) {
    this.patches.push([name, patch]);
  }
}
