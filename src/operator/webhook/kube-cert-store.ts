/**
 * {@link WebhookCertStore} on @kubernetes/client-node (to be swapped onto the project's own client in src/kube).
 */
import {
  ApiextensionsV1Api,
  ApiException,
  CoreV1Api,
  KubeConfig,
  PatchStrategy,
  setHeaderOptions,
} from '@kubernetes/client-node';
import type { StoredSecret, WebhookCertStore, CrdConversionState, SecretStringData } from './cert-store.js';

const encode = (data: SecretStringData): Record<string, string> =>
  Object.fromEntries(Object.entries(data).map(([k, v]) => [k, Buffer.from(v).toString('base64')]));
const decode = (data: Record<string, string> | undefined): SecretStringData =>
  Object.fromEntries(Object.entries(data ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64').toString('utf8')]));

const statusOf = (err: unknown): number | undefined => (err instanceof ApiException ? err.code : undefined);

export class KubeWebhookCertStore implements WebhookCertStore {
  private readonly core: CoreV1Api;
  private readonly ext: ApiextensionsV1Api;

  constructor(kubeConfig: KubeConfig) {
    this.core = kubeConfig.makeApiClient(CoreV1Api);
    this.ext = kubeConfig.makeApiClient(ApiextensionsV1Api);
  }

  /** From a kubeconfig file path (or the default loading rules when omitted). */
  static fromKubeconfig(path?: string): KubeWebhookCertStore {
    const kc = new KubeConfig();
    if (path) kc.loadFromFile(path);
    else kc.loadFromDefault();
    return new KubeWebhookCertStore(kc);
  }

  async getSecret(namespace: string, name: string): Promise<StoredSecret | undefined> {
    try {
      const s = await this.core.readNamespacedSecret({ namespace, name });
      return { data: decode(s.data), resourceVersion: s.metadata?.resourceVersion };
    } catch (err) {
      if (statusOf(err) === 404) return undefined;
      throw err;
    }
  }

  async createSecret(namespace: string, name: string, data: SecretStringData): Promise<'created' | 'exists'> {
    try {
      await this.core.createNamespacedSecret({
        namespace,
        body: { apiVersion: 'v1', kind: 'Secret', metadata: { name, namespace }, type: 'Opaque', data: encode(data) },
      });
      return 'created';
    } catch (err) {
      if (statusOf(err) === 409) return 'exists';
      throw err;
    }
  }

  async updateSecret(
    namespace: string,
    name: string,
    data: SecretStringData,
    resourceVersion: string | undefined,
  ): Promise<'updated' | 'conflict'> {
    try {
      await this.core.replaceNamespacedSecret({
        namespace,
        name,
        body: {
          apiVersion: 'v1',
          kind: 'Secret',
          metadata: { name, namespace, ...(resourceVersion ? { resourceVersion } : {}) },
          type: 'Opaque',
          data: encode(data),
        },
      });
      return 'updated';
    } catch (err) {
      if (statusOf(err) === 409) return 'conflict';
      throw err;
    }
  }

  async getCrdConversion(name: string): Promise<CrdConversionState | undefined> {
    try {
      const crd = await this.ext.readCustomResourceDefinition({ name });
      return {
        strategy: crd.spec.conversion?.strategy,
        conversionReviewVersions: crd.spec.conversion?.webhook?.conversionReviewVersions,
      };
    } catch (err) {
      if (statusOf(err) === 404) return undefined;
      throw err;
    }
  }

  async mergePatchCrd(name: string, patch: Record<string, unknown>): Promise<void> {
    await this.ext.patchCustomResourceDefinition(
      { name, body: patch },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    );
  }
}
