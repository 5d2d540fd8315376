/**
 * The pool key of a Sandbox served by the nodes (docs/sandboxd-api.md "Pool key"): which warm pool a create claims
 * from and which pool a SandboxWarmPool fills. One function for both, so a create and the pool that was filled for
 * it can never disagree on the key (the reference system derived it twice, from different places, and creates
 * 503'd forever when they drifted).
 */
import { CocoonAnnotationKeys } from './keys.js';

export type PoolNet = 'none' | 'egress';
export type PoolSize = 'small' | 'medium' | 'large' | 'xlarge';

export interface PoolKeyOf {
  template: string;
  net: PoolNet;
  size: PoolSize;
}

export const POOL_NETS: readonly PoolNet[] = ['none', 'egress'];
export const POOL_SIZES: readonly PoolSize[] = ['small', 'medium', 'large', 'xlarge'];

/** `image:latest` and `image` are one template; whitespace is never part of a name. */
export function normalizeTemplate(template: string): string {
  return template.trim().replace(/:latest$/, '');
}

export function poolKeyString(k: PoolKeyOf): string {
  return `${k.template}|${k.net}|${k.size}`;
}

export function describePoolKey(k: PoolKeyOf): string {
  return `template=${k.template} net=${k.net} size=${k.size}`;
}

const SUFFIX: Record<string, number> = {
  '': 1,
  n: 1e-9,
  u: 1e-6,
  m: 1e-3,
  k: 1e3,
  M: 1e6,
  G: 1e9,
  T: 1e12,
  P: 1e15,
  E: 1e18,
  Ki: 2 ** 10,
  Mi: 2 ** 20,
  Gi: 2 ** 30,
  Ti: 2 ** 40,
  Pi: 2 ** 50,
  Ei: 2 ** 60,
};

/** A resource.Quantity (`500m`, `2`, `1.5Gi`, `1e3`) as a number; undefined when it does not parse. */
export function parseQuantity(q: string | number | undefined): number | undefined {
  if (q === undefined) return undefined;
  if (typeof q === 'number') return Number.isFinite(q) ? q : undefined;
  const m = /^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$/.exec(q.trim());
  if (!m) return undefined;
  const base = Number(m[1]);
  if (m[2]) return base * 10 ** Number(m[2].slice(1));
  return base * SUFFIX[m[3] ?? '']!;
}

interface ContainerLike {
  image?: string;
  resources?: { requests?: Record<string, string | number>; limits?: Record<string, string | number> };
}

export interface PoolKeySource {
  /** The object's own annotations (Sandbox or SandboxTemplate metadata). */
  annotations?: Record<string, string> | undefined;
  podTemplate?: {
    metadata?: { annotations?: Record<string, string> | undefined } | undefined;
    spec?: { containers?: ContainerLike[] } | undefined;
  };
}

/**
 * Size from the first container's resources (request, else limit): above 4 CPU or 8 GiB → large, above 1 CPU or
 * 2 GiB → medium, else small; an explicit `sandbox.cocoonstack.io/size` annotation wins. The VM gets its tier's
 * shape, not the request (tiers: src/sandboxd/pool-key.ts).
 */
function sizeOf(c: ContainerLike | undefined): PoolSize {
  const pick = (name: string) =>
    parseQuantity(c?.resources?.requests?.[name]) || parseQuantity(c?.resources?.limits?.[name]) || 0;
  const cpu = pick('cpu');
  const mem = pick('memory');
  if (cpu > 4 || mem > 8 * 2 ** 30) return 'large';
  if (cpu > 1 || mem > 2 * 2 ** 30) return 'medium';
  return 'small';
}

export type PoolKeyResult = { ok: true; key: PoolKeyOf } | { ok: false; field: string; message: string };

/**
 * The key for a Sandbox (or SandboxTemplate): template = first container's image; net and size from the object's
 * annotations, else its pod template's annotations (both places, so it does not matter where a user put them).
 */
export function derivePoolKey(src: PoolKeySource): PoolKeyResult {
  const containers = src.podTemplate?.spec?.containers ?? [];
  const image = containers[0]?.image;
  if (!image || !image.trim())
    return {
      ok: false,
      field: 'spec.podTemplate.spec.containers[0].image',
      message: 'Required value: the first container image names the sandbox template (e.g. sandbox/base)',
    };
  const annotation = (key: string) =>
    src.annotations?.[key]?.trim() || src.podTemplate?.metadata?.annotations?.[key]?.trim() || undefined;
  const net = annotation(CocoonAnnotationKeys.net) ?? 'none';
  if (!(POOL_NETS as readonly string[]).includes(net))
    return {
      ok: false,
      field: `metadata.annotations[${CocoonAnnotationKeys.net}]`,
      message: `Unsupported value: "${net}": supported values: ${POOL_NETS.map((n) => `"${n}"`).join(', ')}`,
    };
  const explicitSize = annotation(CocoonAnnotationKeys.size);
  if (explicitSize !== undefined && !(POOL_SIZES as readonly string[]).includes(explicitSize))
    return {
      ok: false,
      field: `metadata.annotations[${CocoonAnnotationKeys.size}]`,
      message: `Unsupported value: "${explicitSize}": supported values: ${POOL_SIZES.map((s) => `"${s}"`).join(', ')}`,
    };
  return {
    ok: true,
    key: {
      template: normalizeTemplate(image),
      net: net as PoolNet,
      size: (explicitSize as PoolSize | undefined) ?? sizeOf(containers[0]),
    },
  };
}
