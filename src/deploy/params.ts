/**
 * One object model for both renderings: a manifest is plain data in which a {@link Param} stands for what the
 * installer chooses (a chart value, the release namespace). The kustomize rendering replaces each Param by its
 * default; the chart rendering by the Go template expression that reads it, so `helm template` with default values
 * and `kubectl kustomize` produce the same objects by construction (and a test checks that they do).
 */
import { stringify } from 'yaml';
import { SandboxError } from '../errors.js';

export type Manifest = Record<string, unknown>;

/**
 * A value taken from the chart's values at install time. `scalar` renders in place (`{{ expr }}`); `block` is a
 * map or list rendered with toYaml at the key's indentation. `value` is what kustomize gets (the default);
 * undefined for what only Helm can compute (generated certificates), which kustomize refuses to render.
 */
export class Param {
  constructor(
    readonly expr: string,
    readonly value: unknown,
    readonly form: 'scalar' | 'block' = 'scalar',
  ) {}
}

/** Read a dotted path out of the default values. */
export function lookupPath(values: unknown, path: string): unknown {
  let cur = values;
  for (const key of path.split('.')) {
    if (cur === null || typeof cur !== 'object' || !(key in cur))
      throw new SandboxError('deploy.values', `no value at "${path}" (missing "${key}")`, {
        hint: 'add it to the values schema in src/deploy/values.ts',
      });
    cur = (cur as Record<string, unknown>)[key];
  }
  return cur;
}

/** Go template string literal (JSON's escaping is a subset of Go's). */
const goString = (s: string) => JSON.stringify(s);

export class ParamFactory {
  constructor(private readonly defaults: unknown) {}

  /** `.Values.<path>`, quoted when it is a string so YAML never reinterprets it. */
  value(path: string): Param {
    const v = lookupPath(this.defaults, path);
    return new Param(typeof v === 'string' ? `.Values.${path} | quote` : `.Values.${path}`, v);
  }

  /** A map or list value, rendered as a YAML block. */
  block(path: string): Param {
    return new Param(`.Values.${path}`, lookupPath(this.defaults, path), 'block');
  }

  /** The release namespace; kustomize's default is `namespace`. */
  namespace(defaultNamespace: string): Param {
    return new Param('.Release.Namespace | quote', defaultNamespace);
  }

  /** Literal text and values joined into one string (`--flag=<value>`, `<repo>:<tag>`, `<ns>/<name>`). */
  join(parts: ReadonlyArray<string | Param>): string | Param {
    if (parts.every((p) => typeof p === 'string')) return parts.join('');
    const operands = parts.map((p) => {
      if (typeof p === 'string') return goString(p);
      if (p.form !== 'scalar') throw new SandboxError('deploy.param', `cannot join the block value ${p.expr}`);
      return `(${p.expr.replace(/ \| quote$/, '')})`;
    });
    const value = parts.some((p) => p instanceof Param && p.value === undefined)
      ? undefined
      : parts.map((p) => (typeof p === 'string' ? p : String(p.value))).join('');
    return new Param(`print ${operands.join(' ')} | quote`, value);
  }
}

/** Deep-replace every Param by its default: the objects kustomize ships. */
export function concrete<T>(obj: T, where = ''): T {
  if (obj instanceof Param) {
    if (obj.value === undefined)
      throw new SandboxError('deploy.param', `${where}: ${obj.expr} has no value outside Helm`, {
        hint: 'this object is Helm-only; leave it out of the kustomize rendering',
      });
    return structuredClone(obj.value) as T;
  }
  if (Array.isArray(obj)) return obj.map((v, i) => concrete(v, `${where}[${i}]`)) as T;
  if (obj !== null && typeof obj === 'object')
    return Object.fromEntries(Object.entries(obj).map(([k, v]) => [k, concrete(v, `${where}.${k}`)])) as T;
  return obj;
}

/** YAML of one object in the shape both renderings use (no line folding, so templates stay line-addressable). */
export function toYaml(obj: unknown): string {
  return stringify(obj, { lineWidth: 0, aliasDuplicateObjects: false });
}

/**
 * YAML of one object with each Param as Go template text: a scalar in place, a block as
 * `key: {{- toYaml <expr> | nindent <n> }}` so an empty map still renders (as `{}`).
 */
export function helmYaml(obj: unknown): string {
  const params: Param[] = [];
  const token = (i: number) => `HELMPARAM${i}X`;
  const swap = (v: unknown): unknown => {
    if (v instanceof Param) return token(params.push(v) - 1);
    if (Array.isArray(v)) return v.map(swap);
    if (v !== null && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, swap(x)]));
    return v;
  };
  // Text that only looks like a template (alert annotations, dashboard legends) must reach the output as is.
  const text = toYaml(swap(obj)).replace(/\{\{|\}\}/g, (m) => `{{ ${JSON.stringify(m)} }}`);
  return text.replace(/^( *)(- )?([^\n]*?)HELMPARAM(\d+)X$/gm, (_m, indent: string, dash = '', key: string, i) => {
    const p = params[Number(i)]!;
    if (p.form === 'scalar') return `${indent}${dash}${key}{{ ${p.expr} }}`;
    if (!key.endsWith(': ') || dash)
      throw new SandboxError('deploy.param', `block value ${p.expr} must be a map entry's whole value`);
    return `${indent}${key.slice(0, -1)}{{- toYaml (${p.expr}) | nindent ${indent.length + 2} }}`;
  });
}
