/**
 * The e2b template ids this server accepts and the warm pool each maps to: the alias table (docs/e2b.md). The
 * default maps `base` to sandbox/base; `--e2b-templates-file` (YAML or JSON: `{templates: {<id>: {template, size?,
 * net?, idleHibernateSeconds?}}}`) replaces it. A templateID outside the table is a 404 naming the ones there are.
 */
import { readFileSync } from 'node:fs';
import { parse } from 'yaml';
import { MAX_IDLE_HIBERNATE_SECONDS } from '../../api/keys.js';
import { POOL_NETS, POOL_SIZES, type PoolNet, type PoolSize } from '../../api/pool-key.js';
import { SandboxError } from '../../errors.js';

export interface TemplateAlias {
  /** The e2b template id (what `Sandbox.create(<id>)` names). */
  id: string;
  /** The guest template of the pool (a Sandbox's container image). */
  template: string;
  size: PoolSize;
  net: PoolNet;
  /** Idle policy of its sandboxes: hibernate after this many seconds without use (docs/e2b.md "Idle suspend"). */
  idleHibernateSeconds?: number;
}

export const DEFAULT_TEMPLATE_ALIASES: readonly TemplateAlias[] = [
  { id: 'base', template: 'sandbox/base', size: 'small', net: 'none' },
];

export function parseTemplateAliases(text: string, source: string): TemplateAlias[] {
  let doc: unknown;
  try {
    doc = parse(text);
  } catch (err) {
    throw new SandboxError('apiserver.flags', `${source}: not YAML or JSON: ${(err as Error).message}`);
  }
  const table = (doc as { templates?: unknown } | null)?.templates;
  if (typeof table !== 'object' || table === null || Array.isArray(table))
    throw new SandboxError(
      'apiserver.flags',
      `${source}: want {templates: {<id>: {template, size?, net?, idleHibernateSeconds?}}}`,
    );
  const out: TemplateAlias[] = [];
  for (const [id, raw] of Object.entries(table as Record<string, unknown>)) {
    const v = (typeof raw === 'string' ? { template: raw } : raw) as Record<string, unknown> | null;
    const where = `${source}: templates.${id}`;
    if (!/^[a-zA-Z0-9][a-zA-Z0-9._-]*$/.test(id)) throw new SandboxError('apiserver.flags', `${where}: bad id`);
    if (typeof v?.template !== 'string' || !v.template)
      throw new SandboxError('apiserver.flags', `${where}.template: required (a guest template such as sandbox/base)`);
    const size = (v.size ?? 'small') as PoolSize;
    const net = (v.net ?? 'none') as PoolNet;
    if (!POOL_SIZES.includes(size))
      throw new SandboxError('apiserver.flags', `${where}.size: one of ${POOL_SIZES.join(', ')}`);
    if (!POOL_NETS.includes(net))
      throw new SandboxError('apiserver.flags', `${where}.net: one of ${POOL_NETS.join(', ')}`);
    const idle = v.idleHibernateSeconds;
    if (
      idle !== undefined &&
      (typeof idle !== 'number' || !Number.isInteger(idle) || idle < 0 || idle > MAX_IDLE_HIBERNATE_SECONDS)
    )
      throw new SandboxError(
        'apiserver.flags',
        `${where}.idleHibernateSeconds: whole seconds from 0 (never) to ${MAX_IDLE_HIBERNATE_SECONDS}`,
      );
    out.push({ id, template: v.template, size, net, ...(idle ? { idleHibernateSeconds: idle } : {}) });
  }
  if (out.length === 0) throw new SandboxError('apiserver.flags', `${source}: the table is empty`);
  return out;
}

export function readTemplateAliases(path: string | undefined): TemplateAlias[] {
  if (!path) return [...DEFAULT_TEMPLATE_ALIASES];
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new SandboxError('apiserver.flags', `--e2b-templates-file ${path}: ${(err as Error).message}`);
  }
  return parseTemplateAliases(text, path);
}
