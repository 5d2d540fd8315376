/**
 * The contracts inside sandbox-apiserver, shaped like k8s.io/apiserver's: who is calling (UserInfo, from the
 * authenticator chain), what the request is (RequestInfo, parsed from the path alone), whether it may proceed
 * (Authorizer), and the storage objects that serve one resource each (ResourceStorage). Discovery and OpenAPI are
 * derived from the storage map, never written separately.
 */
import type { IncomingMessage } from 'node:http';
import type { TSchema } from '@sinclair/typebox';

/** An authenticated caller, as Kubernetes' user.Info. */
export interface UserInfo {
  name: string;
  uid?: string;
  groups: string[];
  extra: Record<string, string[]>;
}

/**
 * What one authenticator concluded: `undefined` when the request carries no credentials of its kind (the next one
 * is asked), a user, or a failure (credentials present but invalid: the chain stops with 401).
 */
export type AuthenticationResult = { user: UserInfo } | { failure: string } | undefined;

export interface Authenticator {
  authenticate(req: IncomingMessage): Promise<AuthenticationResult> | AuthenticationResult;
}

/** The request as k8s.io/apiserver's RequestInfoFactory sees it (pkg/endpoints/request/requestinfo.go). */
export interface RequestInfo {
  /** True for /apis/<group>/<version>/... paths naming a resource; discovery, OpenAPI and health are not. */
  isResourceRequest: boolean;
  path: string;
  /**
   * Resource requests: get, list, watch, create, update, patch, delete, deletecollection.
   * Non-resource requests: the lowercase HTTP method.
   */
  verb: string;
  apiGroup: string;
  apiVersion: string;
  /** '' for cluster-wide requests. */
  namespace: string;
  resource: string;
  subresource: string;
  name: string;
}

export interface AuthorizationDecision {
  allowed: boolean;
  /** Why (from the SubjectAccessReview, or the local rule that decided). */
  reason: string;
}

export interface Authorizer {
  authorize(user: UserInfo, info: RequestInfo): Promise<AuthorizationDecision> | AuthorizationDecision;
}

/** One column of the `kubectl get` Table, and how to compute its cell from a served object. */
export interface TableColumn<T> {
  name: string;
  type: 'string' | 'integer' | 'number' | 'boolean' | 'date';
  format?: string;
  description: string;
  /** 0: always shown; > 0: only with `-o wide`. */
  priority: number;
  cell(obj: T, now: number): string | number | boolean;
}

/** A POST-only action subresource (sandboxes/{name}/pause ...): request kind in, response kind out. */
export interface ActionSubresource {
  name: string;
  requestKind: string;
  requestSchema: TSchema;
  responseKind: string;
  responseSchema: TSchema;
  description: string;
}

/**
 * The static description of one served resource: everything discovery and OpenAPI need. The verbs are what the
 * storage implements; the server routes only those (anything else is 405).
 */
export interface ResourceDescriptor {
  group: string;
  version: string;
  kind: string;
  listKind: string;
  plural: string;
  singular: string;
  namespaced: boolean;
  shortNames: string[];
  categories: string[];
  verbs: Array<'get' | 'list' | 'watch' | 'create' | 'delete'>;
  /** The object schema (TypeBox, the same source as the CRDs). */
  schema: TSchema;
  description: string;
  subresources: ActionSubresource[];
}
