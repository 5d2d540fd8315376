/**
 * What a request is, from its method, path and query alone, exactly as k8s.io/apiserver's RequestInfoFactory
 * (pkg/endpoints/request/requestinfo.go) computes it: the authorizer asks about this, so the server must route by
 * the same parse (one `requestUrl`, one `parseRequestInfo`, one `isWatch`), or what is authorized and what is
 * served could differ.
 */
import type { IncomingMessage } from 'node:http';
import { SandboxError } from '../errors.js';
import { requestTarget } from '../net/request-target.js';
import type { RequestInfo } from './types.js';

const API_PREFIXES = new Set(['api', 'apis']);
const GROUPLESS_API_PREFIXES = new Set(['api']);
/** Legacy `/apis/<g>/<v>/watch/...` and `/proxy/...` paths name their verb in the path. */
const SPECIAL_VERBS = new Set(['proxy', 'watch']);
const SPECIAL_VERBS_NO_SUBRESOURCES = new Set(['proxy']);
const NAMESPACE_SUBRESOURCES = new Set(['status', 'finalize']);

const METHOD_VERBS = new Map([
  ['POST', 'create'],
  ['GET', 'get'],
  ['HEAD', 'get'],
  ['PUT', 'update'],
  ['PATCH', 'patch'],
  ['DELETE', 'delete'],
]);

function badRequest(message: string): SandboxError {
  return new SandboxError('apiserver.bad-request', message, {
    hint: 'send a path of the form /apis/<group>/<version>/[namespaces/<namespace>/]<resource>[/<name>[/<subresource>]]',
  });
}

/**
 * The request's URL, parsed so that the path can never be read as an authority: `new URL(req.url, base)` takes
 * `//evil/x` as host `evil`, path `/x`. Dot segments are resolved here, once, for routing and authorization alike.
 */
export function requestUrl(req: Pick<IncomingMessage, 'url'>): URL {
  return requestTarget(req, badRequest);
}

/** Go's URL.Path: the percent-decoded path (so an encoded `/` separates segments, as upstream). */
function decodePath(pathname: string): string {
  try {
    return decodeURIComponent(pathname);
  } catch {
    throw badRequest(`the path ${JSON.stringify(pathname.slice(0, 200))} has an invalid percent-encoding`);
  }
}

function splitPath(path: string): string[] {
  const trimmed = path.replace(/^\/+|\/+$/g, '');
  return trimmed === '' ? [] : trimmed.split('/');
}

/**
 * Whether a list is a watch: like apimachinery's Convert_Slice_string_To_bool, only an absent `watch`, `0` or
 * `false` (any case) mean no; any other value, the empty string included, means yes.
 */
export function isWatch(query: URLSearchParams): boolean {
  const v = query.get('watch');
  return v !== null && v !== '0' && v.toLowerCase() !== 'false';
}

export interface FieldSelectorTerm {
  field: string;
  op: '=' | '==' | '!=';
  value: string;
}

/** apimachinery fields.UnescapeValue: `\\`, `\,` and `\=` are the only escapes; a bare `,` or `=` is an error. */
function unescapeValue(s: string): string {
  let out = '';
  let inSlash = false;
  for (const c of s) {
    if (inSlash) {
      if (c !== '\\' && c !== ',' && c !== '=') throw new Error(`invalid escape sequence \\${c}`);
      out += c;
      inSlash = false;
    } else if (c === '\\') inSlash = true;
    else if (c === ',' || c === '=') throw new Error(`unescaped ${c} in a field selector value`);
    else out += c;
  }
  if (inSlash) throw new Error('a field selector value ends in an unfinished escape');
  return out;
}

/**
 * A field selector's terms as apimachinery's fields.ParseSelector reads them: split on unescaped commas, sorted,
 * each split at its first operator (`!=`, `==`, `=`), the value unescaped. Throws on a malformed selector.
 */
export function parseFieldSelector(selector: string): FieldSelectorTerm[] {
  const parts: string[] = [];
  let start = 0;
  let inSlash = false;
  for (let i = 0; i < selector.length; i++) {
    const c = selector[i];
    if (inSlash) inSlash = false;
    else if (c === '\\') inSlash = true;
    else if (c === ',') {
      parts.push(selector.slice(start, i));
      start = i + 1;
    }
  }
  if (selector !== '') parts.push(selector.slice(start));
  parts.sort();
  const terms: FieldSelectorTerm[] = [];
  for (const part of parts) {
    if (part === '') continue;
    const term = splitTerm(part);
    if (!term) throw new Error(`invalid field selector ${JSON.stringify(selector)}: cannot understand ${part}`);
    terms.push({ ...term, value: unescapeValue(term.value) });
  }
  return terms;
}

function splitTerm(part: string): FieldSelectorTerm | undefined {
  for (let i = 0; i < part.length; i++)
    for (const op of ['!=', '==', '='] as const)
      if (part.startsWith(op, i)) return { field: part.slice(0, i), op, value: part.slice(i + op.length) };
  return undefined;
}

/** The name a list or watch is restricted to by `fieldSelector=metadata.name=X` (fields.RequiresExactMatch). */
function nameFromFieldSelector(selector: string | null): string | undefined {
  if (!selector) return undefined;
  let terms: FieldSelectorTerm[];
  try {
    terms = parseFieldSelector(selector);
  } catch {
    return undefined; // upstream, too, authorizes an unparsable selector as an unnamed list
  }
  return terms.find((t) => t.field === 'metadata.name' && t.op !== '!=')?.value;
}

/** apimachinery path.IsValidPathSegmentName. */
function isValidPathSegmentName(name: string): boolean {
  return name !== '.' && name !== '..' && !name.includes('/') && !name.includes('%');
}

/**
 * The RequestInfo of one request. `/apis`, `/apis/<group>`, `/apis/<group>/<version>`, `/openapi/...` and the
 * health paths are non-resource requests with the lowercase HTTP method as verb. Throws a SandboxError (answer
 * 400) for a path that cannot be decoded or a special verb with nothing after it.
 */
export function parseRequestInfo(method: string, url: URL): RequestInfo {
  const path = decodePath(url.pathname);
  const info: RequestInfo = {
    isResourceRequest: false,
    path,
    verb: method.toLowerCase(),
    apiGroup: '',
    apiVersion: '',
    namespace: '',
    resource: '',
    subresource: '',
    name: '',
  };
  let parts = splitPath(path);
  if (parts.length < 3 || !API_PREFIXES.has(parts[0]!)) return info;
  const prefix = parts[0]!;
  parts = parts.slice(1);
  let apiGroup = '';
  if (!GROUPLESS_API_PREFIXES.has(prefix)) {
    if (parts.length < 3) return info;
    apiGroup = parts[0]!;
    parts = parts.slice(1);
  }
  const apiVersion = parts[0]!;
  parts = parts.slice(1);

  let verb: string;
  if (SPECIAL_VERBS.has(parts[0]!)) {
    if (parts.length < 2) throw badRequest(`cannot tell the resource from ${path}`);
    verb = parts[0]!;
    parts = parts.slice(1);
  } else verb = METHOD_VERBS.get(method) ?? '';

  let namespace = '';
  if (parts[0] === 'namespaces' && parts.length > 1) {
    namespace = parts[1]!;
    // namespaces/<ns>/status and /finalize are subresources of the namespace; anything else is a resource in it
    if (parts.length > 2 && !NAMESPACE_SUBRESOURCES.has(parts[2]!)) parts = parts.slice(2);
  }

  let subresource = '';
  if (parts.length >= 3 && !SPECIAL_VERBS_NO_SUBRESOURCES.has(verb)) subresource = parts[2]!;
  let name = parts.length >= 2 ? parts[1]! : '';
  const resource = parts[0] ?? '';

  if (name === '' && verb === 'get') {
    verb = isWatch(url.searchParams) ? 'watch' : 'list';
    const selected = nameFromFieldSelector(url.searchParams.get('fieldSelector'));
    if (selected !== undefined && isValidPathSegmentName(selected)) name = selected;
  }
  if (name === '' && verb === 'delete') verb = 'deletecollection';

  return { ...info, isResourceRequest: true, verb, apiGroup, apiVersion, namespace, resource, subresource, name };
}
