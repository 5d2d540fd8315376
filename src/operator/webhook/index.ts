/**
 * The operator's conversion webhook (docs/api.md "Conversion webhook"): `startWebhook()` from the operator's
 * composition root.
 */
export { startWebhook, webhookCrdNames, type WebhookOptions, type WebhookHandle } from './webhook.js';
export {
  startConversionWebhookServer,
  CONVERT_PATH,
  type ConversionWebhookServer,
  type ConversionWebhookServerOptions,
  type TlsMaterial,
} from './server.js';
export {
  handleConversionReview,
  failureReview,
  CONVERSION_REVIEW_API_VERSIONS,
  type ConversionReviewResponseBody,
  type ConversionReviewResult,
} from './conversion-review.js';
export type { WebhookCertStore, StoredSecret, CrdConversionState, SecretStringData } from './cert-store.js';
export {
  CA_COMMON_NAME,
  DEFAULT_CERT_SECRET,
  generateBundle,
  ensureCertSecret,
  injectCaBundle,
  conversionPatch,
  serviceSans,
  unfitReason,
  type CertificateBundle,
  type WebhookIdentity,
  type ConversionClientTarget,
} from './certs.js';
export { KubeWebhookCertStore } from './kube-cert-store.js';
