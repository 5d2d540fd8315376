/**
 * What a claim may add to the Sandbox it gets (docs/claim-model.md "Injection rules"): additionalPodMetadata, env and
 * volumeClaimTemplates, each gated by the template's policy. Pure functions; the errors carry the Ready reason the
 * claim reports.
 */
import { readFileSync } from 'node:fs';
import { SandboxError } from '../errors.js';
import { CLAIM_REASON_CODES } from './claim-status.js';
import type {
  EnvVar,
  EnvVarsInjectionPolicy,
  PersistentVolumeClaimTemplate,
  PodMetadata,
  PodSpec,
  VolumeClaimTemplatesPolicy,
} from './index.js';

/** A claim error that is the user's to fix: reported as the claim's Ready reason, never retried with backoff. */
export class ClaimInputError extends SandboxError {
  constructor(
    readonly reason: 'InvalidMetadata' | 'EnvVarsInjectionRejected' | 'VolumeClaimTemplatesError',
    message: string,
  ) {
    super(CLAIM_REASON_CODES[reason], message);
    this.name = 'ClaimInputError';
  }
}

export const DEFAULT_ALLOWED_LABEL_DOMAINS = ['sandbox.users.io'] as const;
export const ALLOWED_LABEL_DOMAINS_FILE = '/etc/sandbox-config/allowed-label-domains';
const FORBIDDEN_ANNOTATION_DOMAINS = ['kubernetes.io', 'k8s.io', 'agents.x-k8s.io'];

/** The label-domain allow-list: the config file (comma/newline separated) or the default. */
export function loadAllowedLabelDomains(path = ALLOWED_LABEL_DOMAINS_FILE): string[] {
  try {
    const list = readFileSync(path, 'utf8')
      .split(/[,\n]/)
      .map((s) => s.trim().toLowerCase())
      .filter(Boolean);
    return list.length ? list : [...DEFAULT_ALLOWED_LABEL_DOMAINS];
  } catch {
    return [...DEFAULT_ALLOWED_LABEL_DOMAINS];
  }
}

const NAME_RE = /^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;
const DNS1123_SUBDOMAIN_RE = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/** Kubernetes qualified-name check; returns the problem or undefined. */
export function qualifiedNameProblem(key: string): string | undefined {
  const parts = key.split('/');
  if (parts.length > 2) return `"${key}" is not a qualified name (more than one "/")`;
  const name = parts.length === 2 ? parts[1]! : parts[0]!;
  const prefix = parts.length === 2 ? parts[0]! : undefined;
  if (prefix !== undefined && (prefix.length === 0 || prefix.length > 253 || !DNS1123_SUBDOMAIN_RE.test(prefix)))
    return `"${key}" has an invalid prefix (must be a DNS subdomain)`;
  if (name.length === 0 || name.length > 63 || !NAME_RE.test(name)) return `"${key}" is not a qualified name`;
  return undefined;
}

/** Kubernetes label-value check; returns the problem or undefined. */
export function labelValueProblem(key: string, value: string): string | undefined {
  if (value === '') return undefined;
  if (value.length > 63 || !NAME_RE.test(value)) return `label "${key}" has an invalid value "${value}"`;
  return undefined;
}

const prefixOf = (key: string) => (key.includes('/') ? key.slice(0, key.indexOf('/')).toLowerCase() : undefined);
const inDomain = (prefix: string, domain: string) => prefix === domain || prefix.endsWith(`.${domain}`);

/** Validate additionalPodMetadata; throws ClaimInputError('InvalidMetadata'). */
export function validateAdditionalPodMetadata(
  md: PodMetadata | undefined,
  allowedLabelDomains: readonly string[],
): void {
  if (!md) return;
  const fail = (detail: string) => {
    throw new ClaimInputError('InvalidMetadata', `invalid additionalPodMetadata: ${detail}`);
  };
  for (const [key, value] of Object.entries(md.labels ?? {})) {
    const p = qualifiedNameProblem(key) ?? labelValueProblem(key, value);
    if (p) fail(p);
    if (key.toLowerCase() === 'app' && value.toLowerCase() === 'sandbox-router')
      fail(`label "${key}=${value}" is reserved`);
    const prefix = prefixOf(key);
    if (prefix === undefined) fail(`label "${key}" must have a domain prefix`);
    else if (!allowedLabelDomains.some((d) => inDomain(prefix, d)))
      fail(`label "${key}" is outside the allowed domains (${allowedLabelDomains.join(', ')})`);
  }
  for (const key of Object.keys(md.annotations ?? {})) {
    const p = qualifiedNameProblem(key);
    if (p) fail(p);
    const prefix = prefixOf(key);
    if (prefix !== undefined && FORBIDDEN_ANNOTATION_DOMAINS.some((d) => inDomain(prefix, d)))
      fail(`annotation "${key}" uses a reserved domain`);
  }
}

/**
 * Merge claim metadata into pod-template metadata. A key the template defines with a different value is an
 * error (the claim cannot override the template).
 */
export function mergePodMetadata(base: PodMetadata | undefined, extra: PodMetadata | undefined): PodMetadata {
  const out: PodMetadata = {};
  if (base?.labels) out.labels = { ...base.labels };
  if (base?.annotations) out.annotations = { ...base.annotations };
  for (const kind of ['labels', 'annotations'] as const) {
    for (const [k, v] of Object.entries(extra?.[kind] ?? {})) {
      const have = out[kind]?.[k];
      if (have !== undefined && have !== v)
        throw new SandboxError(
          'claim.metadata-conflict',
          `metadata override conflict: ${kind === 'labels' ? 'label' : 'annotation'} "${k}" is defined in template with value "${have}", but claim requests "${v}"`,
        );
      (out[kind] ??= {})[k] = v;
    }
  }
  return out;
}

/** Inject claim env into a pod spec copy. Throws ClaimInputError or a plain error. */
export function injectEnv(
  spec: PodSpec,
  env: readonly EnvVar[] | undefined,
  policy: EnvVarsInjectionPolicy | undefined,
): PodSpec {
  if (!env?.length) return spec;
  const effective = policy ?? 'Disallowed';
  if (effective !== 'Allowed' && effective !== 'Overrides')
    throw new ClaimInputError(
      'EnvVarsInjectionRejected',
      'environment variable injection rejected: environment variable injection is not allowed by the template policy',
    );
  const out = structuredClone(spec);
  for (const e of env) {
    let target;
    if (e.containerName) {
      target =
        out.containers.find((c) => c.name === e.containerName) ??
        out.initContainers?.find((c) => c.name === e.containerName);
      if (!target)
        throw new SandboxError(
          'claim.env',
          `container "${e.containerName}" not found for environment variable "${e.name}"`,
        );
    } else {
      target = out.containers[0];
      if (!target)
        throw new SandboxError('claim.env', 'the pod template has no containers to inject environment variables into');
    }
    const vars = (target.env ??= []);
    const existing = vars.findIndex((v) => v.name === e.name);
    if (effective === 'Allowed') {
      if (target.envFrom?.length)
        throw new ClaimInputError(
          'EnvVarsInjectionRejected',
          `environment variable injection rejected: container "${target.name}" uses envFrom, which injection could silently override`,
        );
      if (existing >= 0)
        throw new SandboxError(
          'claim.env',
          `environment variable "${e.name}" already exists in container "${target.name}" and the template policy does not allow overrides`,
        );
      vars.push({ name: e.name, value: e.value });
    } else if (existing >= 0) vars[existing] = { ...vars[existing]!, value: e.value };
    else vars.push({ name: e.name, value: e.value });
  }
  return out;
}

function checkNames(list: readonly PersistentVolumeClaimTemplate[], what: string): void {
  const seen = new Set<string>();
  for (const v of list) {
    const name = v.metadata?.name ?? '';
    if (!name)
      throw new ClaimInputError(
        'VolumeClaimTemplatesError',
        `${what} volumeClaimTemplates: every entry needs a metadata.name`,
      );
    if (seen.has(name))
      throw new ClaimInputError('VolumeClaimTemplatesError', `${what} volumeClaimTemplates: duplicate name "${name}"`);
    seen.add(name);
  }
}

/** The Sandbox's VCT list for a claim. Throws ClaimInputError('VolumeClaimTemplatesError'). */
export function mergeVolumeClaimTemplates(
  fromTemplate: readonly PersistentVolumeClaimTemplate[] | undefined,
  fromClaim: readonly PersistentVolumeClaimTemplate[] | undefined,
  policy: VolumeClaimTemplatesPolicy | undefined,
): PersistentVolumeClaimTemplate[] | undefined {
  const base = fromTemplate ?? [];
  checkNames(base, 'template');
  if (!fromClaim?.length) return fromTemplate ? structuredClone([...fromTemplate]) : undefined;
  checkNames(fromClaim, 'claim');
  const effective = policy ?? 'Disallowed';
  if (effective !== 'Allowed' && effective !== 'Overrides')
    throw new ClaimInputError(
      'VolumeClaimTemplatesError',
      'volumeClaimTemplates injection rejected: the template policy does not allow it',
    );
  const out = structuredClone([...base]);
  for (const v of fromClaim) {
    const i = out.findIndex((t) => t.metadata?.name === v.metadata?.name);
    if (i < 0) out.push(structuredClone(v));
    else if (effective === 'Overrides') out[i] = structuredClone(v);
    else
      throw new ClaimInputError(
        'VolumeClaimTemplatesError',
        `volumeClaimTemplates injection rejected: "${v.metadata?.name}" is defined by the template and the policy does not allow overrides`,
      );
  }
  return out;
}
