/**
 * Label and field selectors as kube-apiserver parses them (apimachinery pkg/labels/selector.go and
 * pkg/fields/selector.go): the grammar kubectl `-l` / `--field-selector` and client libraries send. A selector that
 * does not parse is a 400 naming the problem, never "matches nothing".
 */
import { badRequest } from './status.js';

type LabelOp = 'in' | 'notin' | 'exists' | '!' | 'gt' | 'lt';

interface LabelRequirement {
  key: string;
  op: LabelOp;
  values: string[];
}

export interface LabelSelector {
  readonly empty: boolean;
  matches(labels: Readonly<Record<string, string>> | undefined): boolean;
  /** Equality requirements (`k=v`, `k in (v)`): what an index can narrow by. */
  equalities(): Array<[string, string]>;
}

const QUALIFIED_NAME = /^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;

function checkKey(key: string, selector: string): void {
  const slash = key.indexOf('/');
  const prefix = slash >= 0 ? key.slice(0, slash) : '';
  const name = slash >= 0 ? key.slice(slash + 1) : key;
  const ok =
    name.length > 0 &&
    name.length <= 63 &&
    QUALIFIED_NAME.test(name) &&
    (slash < 0 || (prefix.length > 0 && prefix.length <= 253 && DNS_SUBDOMAIN.test(prefix)));
  if (!ok) throw badRequest(`unable to parse requirement: invalid label key "${key}" in selector "${selector}"`);
}

function checkValue(value: string, selector: string): void {
  if (value.length > 63 || !LABEL_VALUE.test(value))
    throw badRequest(`unable to parse requirement: invalid label value "${value}" in selector "${selector}"`);
}

/** Splits at top-level commas (commas inside `(...)` belong to a set). */
function splitRequirements(s: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < s.length; i++) {
    if (s[i] === '(') depth++;
    else if (s[i] === ')') depth--;
    else if (s[i] === ',' && depth === 0) {
      out.push(s.slice(start, i));
      start = i + 1;
    }
  }
  out.push(s.slice(start));
  return out.map((r) => r.trim());
}

function parseRequirement(raw: string, selector: string): LabelRequirement {
  if (!raw) throw badRequest(`found '' in label selector "${selector}", expected: identifier`);
  if (raw.startsWith('!')) {
    const key = raw.slice(1).trim();
    checkKey(key, selector);
    return { key, op: '!', values: [] };
  }
  const set = /^(\S+?)\s+(in|notin)\s*\((.*)\)$/.exec(raw);
  if (set) {
    const [, key, op, list] = set as unknown as [string, string, 'in' | 'notin', string];
    checkKey(key, selector);
    if (!list.trim()) throw badRequest(`for '${op}' operator, values set can't be empty in selector "${selector}"`);
    const values = list.split(',').map((v) => v.trim());
    for (const v of values) checkValue(v, selector);
    return { key, op, values };
  }
  const m = /^([^=!<>\s]+)\s*(==|=|!=|>|<)\s*(.*)$/.exec(raw);
  if (m) {
    const [, key, op, value] = m as unknown as [string, string, string, string];
    checkKey(key, selector);
    if (op === '>' || op === '<') {
      if (!/^-?\d+$/.test(value.trim()))
        throw badRequest(`for 'Gt', 'Lt' operators, the value must be an integer in selector "${selector}"`);
      return { key, op: op === '>' ? 'gt' : 'lt', values: [value.trim()] };
    }
    checkValue(value.trim(), selector);
    return { key, op: op === '!=' ? 'notin' : 'in', values: [value.trim()] };
  }
  if (/^\S+$/.test(raw)) {
    checkKey(raw, selector);
    return { key: raw, op: 'exists', values: [] };
  }
  throw badRequest(`unable to parse requirement "${raw}" in label selector "${selector}"`);
}

function matchOne(r: LabelRequirement, labels: Readonly<Record<string, string>> | undefined): boolean {
  const has = labels !== undefined && Object.prototype.hasOwnProperty.call(labels, r.key);
  const v = has ? labels![r.key]! : undefined;
  switch (r.op) {
    case 'in':
      return has && r.values.includes(v!);
    case 'notin':
      return !has || !r.values.includes(v!);
    case 'exists':
      return has;
    case '!':
      return !has;
    case 'gt':
    case 'lt': {
      if (!has || !/^-?\d+$/.test(v!)) return false;
      const n = Number(v);
      const bound = Number(r.values[0]);
      return r.op === 'gt' ? n > bound : n < bound;
    }
  }
}

const EVERYTHING: LabelSelector = { empty: true, matches: () => true, equalities: () => [] };

export function parseLabelSelector(selector: string | null | undefined): LabelSelector {
  const s = (selector ?? '').trim();
  if (!s) return EVERYTHING;
  return selectorOf(splitRequirements(s).map((r) => parseRequirement(r, s)));
}

function selectorOf(reqs: readonly LabelRequirement[]): LabelSelector {
  if (!reqs.length) return EVERYTHING;
  return {
    empty: false,
    matches: (labels) => reqs.every((r) => matchOne(r, labels)),
    equalities: () =>
      reqs.filter((r) => r.op === 'in' && r.values.length === 1).map((r) => [r.key, r.values[0]!] as [string, string]),
  };
}

/** A metav1.LabelSelector object (the form NetworkPolicy `podSelector` and workload selectors take). */
export interface LabelSelectorObject {
  matchLabels?: Readonly<Record<string, string>>;
  matchExpressions?: ReadonlyArray<{ key: string; operator: string; values?: readonly string[] }>;
}

const OPERATORS: Readonly<Record<string, LabelOp>> = { In: 'in', NotIn: 'notin', Exists: 'exists', DoesNotExist: '!' };

/**
 * A LabelSelector object as apimachinery's LabelSelectorAsSelector evaluates it: every matchLabels pair and every
 * matchExpressions requirement must hold; an empty selector matches everything. Undefined when it cannot be
 * evaluated (an unknown operator, In/NotIn without values, values on Exists/DoesNotExist), which kube-apiserver's
 * validation keeps out of stored objects: the caller decides what such a selector selects.
 */
export function labelSelectorFromObject(sel: LabelSelectorObject | undefined): LabelSelector | undefined {
  const reqs: LabelRequirement[] = Object.entries(sel?.matchLabels ?? {}).map(([key, v]) => ({
    key,
    op: 'in',
    values: [v],
  }));
  for (const e of sel?.matchExpressions ?? []) {
    const op = Object.prototype.hasOwnProperty.call(OPERATORS, e.operator) ? OPERATORS[e.operator] : undefined;
    const values = [...(e.values ?? [])];
    if (!op || (op === 'in' || op === 'notin' ? values.length === 0 : values.length > 0)) return undefined;
    reqs.push({ key: e.key, op, values });
  }
  return selectorOf(reqs);
}

export interface FieldRequirement {
  field: string;
  op: '=' | '!=';
  value: string;
}

export interface FieldSelector {
  readonly empty: boolean;
  readonly requirements: readonly FieldRequirement[];
  matches(fields: (field: string) => string): boolean;
  /** The value required by `field=value`, if the selector has one. */
  equal(field: string): string | undefined;
}

/** Unescapes `\,` `\=` `\\` (fields.EscapeValue's inverse) while splitting at unescaped separators. */
function splitEscaped(s: string, sep: string): string[] {
  const out: string[] = [];
  let cur = '';
  for (let i = 0; i < s.length; i++) {
    const c = s[i]!;
    if (c === '\\' && i + 1 < s.length) {
      cur += c + s[++i];
      continue;
    }
    if (c === sep) {
      out.push(cur);
      cur = '';
      continue;
    }
    cur += c;
  }
  out.push(cur);
  return out;
}

const unescape = (v: string) => v.replace(/\\(.)/g, '$1');

/** `allowed`: the field paths this resource supports; any other is a 400 as kube-apiserver answers it. */
export function parseFieldSelector(selector: string | null | undefined, allowed: readonly string[]): FieldSelector {
  const s = (selector ?? '').trim();
  if (!s) return { empty: true, requirements: [], matches: () => true, equal: () => undefined };
  const requirements: FieldRequirement[] = splitEscaped(s, ',').map((part) => {
    const m = /^([^=!\s]+)\s*(==|=|!=)(.*)$/.exec(part.trim());
    if (!m) throw badRequest(`invalid selector: '${s}'; can't understand '${part}'`);
    const [, field, op, value] = m as unknown as [string, string, string, string];
    if (!allowed.includes(field))
      throw badRequest(`field label not supported: ${field} (supported: ${allowed.join(', ')})`);
    return { field, op: op === '!=' ? '!=' : '=', value: unescape(value) };
  });
  return {
    empty: false,
    requirements,
    matches: (get) => requirements.every((r) => (get(r.field) === r.value) === (r.op === '=')),
    equal: (field) => requirements.find((r) => r.field === field && r.op === '=')?.value,
  };
}
