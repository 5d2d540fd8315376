/**
 * Delegated authentication and authorization for sandbox-apiserver, as k8s.io/apiserver's: who the caller is
 * (front proxy, then client certificate, then bearer token by TokenReview, then anonymous if allowed) and whether
 * it may (SubjectAccessReview), with the trust material from kube-system/extension-apiserver-authentication.
 */
import type { KubeClient } from '../../kube/client.js';
import type { Logger } from '../../log/logger.js';
import type { AuthenticationConfigProvider } from './authn-config.js';
import { AuthenticatorChain, type AnonymousOptions } from './chain.js';
import { ClientCertAuthenticator } from './client-cert.js';
import { FrontProxyAuthenticator } from './front-proxy.js';
import { TokenReviewAuthenticator, type TokenReviewAuthenticatorOptions } from './token-review.js';

export {
  AUTHENTICATION_CONFIGMAP,
  caBundleOf,
  parseAuthenticationConfigMap,
  parseCertificateBundle,
} from './authn-config.js';
export type {
  AuthenticationConfig,
  AuthenticationConfigProvider,
  AuthenticationSettings,
  ClientCaConfig,
  RequestHeaderConfig,
} from './authn-config.js';
export { AuthenticationConfigSource, fixedAuthenticationConfig } from './authn-config-source.js';
export type { AuthenticationConfigSourceOptions } from './authn-config-source.js';
export {
  ANONYMOUS_USER,
  AUTHENTICATED_GROUP,
  AuthenticatorChain,
  UNAUTHENTICATED_GROUP,
  withAuthenticatedGroup,
} from './chain.js';
export type { AnonymousOptions, AuthenticatorChainOptions } from './chain.js';
export { ClientCertAuthenticator, CREDENTIAL_ID_EXTRA } from './client-cert.js';
export { FrontProxyAuthenticator } from './front-proxy.js';
export { HEALTH_PATHS, isPathOrSubpath } from './paths.js';
export { SubjectAccessReviewAuthorizer, subjectAccessReviewSpec } from './sar-authorizer.js';
export type { SubjectAccessReviewAuthorizerOptions, SubjectAccessReviewSpec } from './sar-authorizer.js';
export { bearerToken, TokenReviewAuthenticator } from './token-review.js';
export type { TokenReviewAuthenticatorOptions } from './token-review.js';
export { verifyClientChain } from './x509-chain.js';
export type { ChainVerdict } from './x509-chain.js';

export interface DelegatedAuthenticatorOptions {
  tokenReview?: Omit<TokenReviewAuthenticatorOptions, 'logger'>;
  /** Omitted: no anonymous requests. A server wants `{ paths: HEALTH_PATHS }` so kubelet can probe it. */
  anonymous?: AnonymousOptions;
  logger?: Logger;
}

/** The chain upstream's delegated authentication builds: front proxy, client certificate, bearer token. */
export function delegatedAuthenticator(
  client: KubeClient,
  config: AuthenticationConfigProvider,
  opts: DelegatedAuthenticatorOptions = {},
): AuthenticatorChain {
  return new AuthenticatorChain(
    [
      new FrontProxyAuthenticator(config, { logger: opts.logger }),
      new ClientCertAuthenticator(config),
      new TokenReviewAuthenticator(client, { ...opts.tokenReview, logger: opts.logger }),
    ],
    { anonymous: opts.anonymous },
  );
}
