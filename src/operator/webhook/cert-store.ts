/**
 * The Kubernetes calls certificate management needs, as an interface so the certificate logic is tested
 * without a cluster (test/api/webhook.test.ts); kube-cert-store.ts implements it on KubeClient.
 */

/** Secret data as decoded strings (PEM). */
export type SecretStringData = Record<string, string>;

export interface StoredSecret {
  data: SecretStringData;
  resourceVersion: string | undefined;
}

export interface CrdConversionState {
  strategy: string | undefined;
  conversionReviewVersions: string[] | undefined;
}

export interface WebhookCertStore {
  /** undefined when the Secret does not exist. */
  getSecret(namespace: string, name: string): Promise<StoredSecret | undefined>;
  /** `exists` when someone else created it first (the caller adopts theirs). */
  createSecret(namespace: string, name: string, data: SecretStringData): Promise<'created' | 'exists'>;
  /** Replaces data, guarded by resourceVersion; `conflict` when it changed meanwhile. */
  updateSecret(
    namespace: string,
    name: string,
    data: SecretStringData,
    resourceVersion: string | undefined,
  ): Promise<'updated' | 'conflict'>;
  /** undefined when the CRD does not exist. */
  getCrdConversion(name: string): Promise<CrdConversionState | undefined>;
  /** JSON merge patch of the CRD (`{spec: {conversion: …}}`). */
  mergePatchCrd(name: string, patch: Record<string, unknown>): Promise<void>;
}
