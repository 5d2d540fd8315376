import { timingSafeEqual } from 'node:crypto';
import { SandboxError } from '../errors.js';

/**
 * sandboxd's three token kinds (docs/sandboxd-api.md "Transport, authentication, errors"): the node's root token
 * (operator path: full access), tenant tokens (may create claims, never drive operator surfaces) and per-sandbox tokens
 * returned by a claim (guard that sandbox's own endpoints). With no root token and no tenants configured the API is
 * open — only when a flag says so; once any token is configured, a request without one is nobody, whatever that flag
 * says.
 */
export type Principal =
  { kind: 'root' } | { kind: 'tenant'; name: string } | { kind: 'anonymous' } | { kind: 'bearer'; token: string };

export interface AuthConfig {
  rootToken: string | undefined;
  tenants: ReadonlyMap<string, string>; // token -> tenant name
  allowAnonymous: boolean;
}

function same(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/** Who is calling; `bearer` = an unknown token that may still be a sandbox token (checked per sandbox). */
export function identify(header: string | undefined, cfg: AuthConfig): Principal | undefined {
  const m = header ? /^Bearer\s+(.+)$/i.exec(header.trim()) : null;
  // Anonymous callers are operators (isOperator): only a daemon with no token at all may have them.
  if (!m) return cfg.allowAnonymous && !cfg.rootToken && cfg.tenants.size === 0 ? { kind: 'anonymous' } : undefined;
  const token = m[1]!.trim();
  if (cfg.rootToken && same(token, cfg.rootToken)) return { kind: 'root' };
  for (const [t, name] of cfg.tenants) if (same(token, t)) return { kind: 'tenant', name };
  return { kind: 'bearer', token };
}

export function isOperator(p: Principal): boolean {
  return p.kind === 'root' || p.kind === 'anonymous';
}

/**
 * 403 unless `p` is the fleet's root (an operator): a claim's or a fork's Kubernetes objects are served by
 * sandbox-apiserver in the namespace they name, so whoever gives one decides where a sandbox appears. Tenants and
 * sandbox tokens are confined to no namespace here, so they give none (`field` names the refused field).
 */
export function assertMayGiveObjects(p: Principal, field: string): void {
  if (!isOperator(p))
    throw new SandboxError(
      'sandboxd.forbidden',
      `${field}: only the fleet's root token may give a sandbox a Kubernetes object; create sandboxes through the Kubernetes API (sandbox-apiserver) or leave ${field} out`,
    );
}

/** The tenant a principal claims for (recorded on its claims, which are all it lists). */
export function tenantOf(p: Principal): string | undefined {
  return p.kind === 'tenant' ? p.name : undefined;
}

/** Operators, and whoever holds the sandbox's token, in the header or (some routes) in the body. */
export function mayAccessSandbox(p: Principal, sandboxToken: string, bodyToken?: string): boolean {
  if (isOperator(p)) return true;
  if (p.kind === 'bearer' && same(p.token, sandboxToken)) return true;
  return bodyToken !== undefined && bodyToken !== '' && same(bodyToken, sandboxToken);
}
