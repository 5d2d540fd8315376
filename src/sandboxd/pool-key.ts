import { SandboxError } from '../errors.js';

/**
 * A warm pool is identified by template / net / size (docs/sandboxd-api.md "Pool key"); the names and values are
 * the API's (src/api/pool-key.ts), shared with the control plane so both sides spell a key the same way. `engine`
 * is accepted and echoed but has one value here (QEMU microvm).
 */
import {
  normalizeTemplate,
  poolKeyString,
  POOL_NETS,
  POOL_SIZES,
  type PoolKeyOf,
  type PoolNet,
  type PoolSize,
} from '../api/pool-key.js';

export type Net = PoolNet;
export type Size = PoolSize;
export type PoolKey = PoolKeyOf;
export const NETS = POOL_NETS;
export const SIZES = POOL_SIZES;
export { normalizeTemplate };

/**
 * VM shape per size tier. Smaller than sandboxd's bare-metal tiers (1/512 MiB ... 4/8 GiB): this host has 2 cores
 * and runs guests under TCG, and a clone only costs the pages it touches, so memory is the ceiling, not the cost.
 */
export const SIZE_TIERS: Readonly<Record<Size, { vcpus: number; memoryMiB: number }>> = {
  small: { vcpus: 1, memoryMiB: 256 },
  medium: { vcpus: 1, memoryMiB: 512 },
  large: { vcpus: 2, memoryMiB: 1024 },
  xlarge: { vcpus: 2, memoryMiB: 2048 },
};

/** Default and validate a key from untrusted input; errors name the field. */
export function parsePoolKey(input: { template?: unknown; net?: unknown; size?: unknown }): PoolKey {
  if (typeof input.template !== 'string' || !input.template.trim())
    throw new SandboxError('sandboxd.bad-request', 'template: required (an image-like name such as sandbox/base)');
  const net = input.net === undefined || input.net === '' ? 'none' : input.net;
  if (typeof net !== 'string' || !(NETS as readonly string[]).includes(net))
    throw new SandboxError(
      'sandboxd.bad-request',
      `net: must be one of ${NETS.join(', ')} (got ${JSON.stringify(input.net)})`,
    );
  const size = input.size === undefined || input.size === '' ? 'small' : input.size;
  if (typeof size !== 'string' || !(SIZES as readonly string[]).includes(size))
    throw new SandboxError(
      'sandboxd.bad-request',
      `size: must be one of ${SIZES.join(', ')} (got ${JSON.stringify(input.size)})`,
    );
  return { template: normalizeTemplate(input.template), net: net as Net, size: size as Size };
}

/** The key as one string (map keys, labels): the same spelling the control plane uses. */
export const keyString = poolKeyString;

export function parseKeyString(s: string): PoolKey {
  const [template = '', net = 'none', size = 'small'] = s.split('|');
  return { template, net: net as Net, size: size as Size };
}
