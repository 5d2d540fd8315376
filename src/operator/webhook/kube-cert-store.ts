/**
 * {@link WebhookCertStore} on the project's KubeClient (src/kube), like every other API call the operator makes.
 */
import {
  CustomResourceDefinitions,
  isAlreadyExists,
  isConflict,
  isNotFound,
  Secrets,
  type KubeClient,
  type KubeObject,
} from '../../kube/index.js';
import type { StoredSecret, WebhookCertStore, CrdConversionState, SecretStringData } from './cert-store.js';

interface Secret extends KubeObject {
  type?: string;
  data?: Record<string, string>;
}

interface Crd extends KubeObject {
  spec: { conversion?: { strategy?: string; webhook?: { conversionReviewVersions?: string[] } } };
}

const encode = (data: SecretStringData): Record<string, string> =>
  Object.fromEntries(Object.entries(data).map(([k, v]) => [k, Buffer.from(v).toString('base64')]));
const decode = (data: Record<string, string> | undefined): SecretStringData =>
  Object.fromEntries(Object.entries(data ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64').toString('utf8')]));

const secret = (namespace: string, name: string, data: SecretStringData, resourceVersion?: string): Secret => ({
  apiVersion: 'v1',
  kind: 'Secret',
  metadata: { name, namespace, ...(resourceVersion ? { resourceVersion } : {}) },
  type: 'Opaque',
  data: encode(data),
});

export class KubeWebhookCertStore implements WebhookCertStore {
  constructor(private readonly client: KubeClient) {}

  async getSecret(namespace: string, name: string): Promise<StoredSecret | undefined> {
    try {
      const s = await this.client.get<Secret>(Secrets, namespace, name);
      return { data: decode(s.data), resourceVersion: s.metadata.resourceVersion };
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  }

  async createSecret(namespace: string, name: string, data: SecretStringData): Promise<'created' | 'exists'> {
    try {
      await this.client.create(Secrets, secret(namespace, name, data));
      return 'created';
    } catch (err) {
      if (isAlreadyExists(err)) return 'exists';
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
      await this.client.update(Secrets, secret(namespace, name, data, resourceVersion));
      return 'updated';
    } catch (err) {
      if (isConflict(err)) return 'conflict';
      throw err;
    }
  }

  async getCrdConversion(name: string): Promise<CrdConversionState | undefined> {
    try {
      const crd = await this.client.get<Crd>(CustomResourceDefinitions, undefined, name);
      return {
        strategy: crd.spec.conversion?.strategy,
        conversionReviewVersions: crd.spec.conversion?.webhook?.conversionReviewVersions,
      };
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  }

  async mergePatchCrd(name: string, patch: Record<string, unknown>): Promise<void> {
    await this.client.patch(CustomResourceDefinitions, undefined, name, patch, 'merge');
  }
}
