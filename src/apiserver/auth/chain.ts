/**
 * The authenticator chain of k8s.io/apiserver's delegated authentication (authenticatorfactory/delegating.go):
 * authenticators asked in order, the first identity wins, and a failure (credentials present but invalid) ends
 * the chain with 401 rather than letting weaker credentials, or none, through. Every authenticated user gets
 * `system:authenticated`. Anonymous access is off unless configured, and can be limited to some paths (like
 * AuthenticationConfiguration's anonymous conditions), e.g. the health endpoints kubelet probes.
 */
import type { IncomingMessage } from 'node:http';
import { parseRequestInfo, requestUrl } from '../request-info.js';
import type { AuthenticationResult, Authenticator, UserInfo } from '../types.js';
import { isPathOrSubpath } from './paths.js';

export const AUTHENTICATED_GROUP = 'system:authenticated';
export const UNAUTHENTICATED_GROUP = 'system:unauthenticated';
export const ANONYMOUS_USER = 'system:anonymous';

export interface AnonymousOptions {
  /** Paths (and their sub-paths) anonymous requests may reach; omitted: every path (authorization decides). */
  paths?: readonly string[];
}

export interface AuthenticatorChainOptions {
  /** Omitted: a request with no credentials is refused (401). */
  anonymous?: AnonymousOptions;
}

/** The user with `system:authenticated` added, as group.AuthenticatedGroupAdder (not to anonymous identities). */
export function withAuthenticatedGroup(user: UserInfo): UserInfo {
  const copy = structuredClone(user); // caches hold the original; a handler may edit what it is given
  const unauthenticated =
    copy.name === ANONYMOUS_USER ||
    copy.groups.includes(AUTHENTICATED_GROUP) ||
    copy.groups.includes(UNAUTHENTICATED_GROUP);
  if (!unauthenticated) copy.groups.push(AUTHENTICATED_GROUP);
  return copy;
}

export class AuthenticatorChain implements Authenticator {
  constructor(
    private readonly authenticators: readonly Authenticator[],
    private readonly opts: AuthenticatorChainOptions = {},
  ) {}

  async authenticate(req: IncomingMessage): Promise<AuthenticationResult> {
    for (const a of this.authenticators) {
      const result = await a.authenticate(req);
      if (result === undefined) continue;
      if ('failure' in result) return result;
      return { user: withAuthenticatedGroup(result.user) };
    }
    return this.anonymous(req);
  }

  private anonymous(req: IncomingMessage): AuthenticationResult {
    const anon = this.opts.anonymous;
    if (!anon) return { failure: 'no credentials (anonymous requests are not allowed)' };
    if (anon.paths) {
      let path: string;
      try {
        // the path the request is routed and authorized by, so a dot segment cannot stretch the allowance
        path = parseRequestInfo(req.method ?? 'GET', requestUrl(req)).path;
      } catch {
        return { failure: 'no credentials, and the request path is unreadable' };
      }
      if (!isPathOrSubpath(path, anon.paths))
        return { failure: `no credentials (anonymous requests are allowed only to ${anon.paths.join(', ')})` };
    }
    return { user: { name: ANONYMOUS_USER, groups: [UNAUTHENTICATED_GROUP], extra: {} } };
  }
}
