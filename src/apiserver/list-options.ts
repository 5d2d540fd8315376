/**
 * ListOptions from the query string, validated as apimachinery's internalversion/validation.go does: invalid
 * combinations are a 422 Invalid of kind ListOptions (group meta.k8s.io) with field causes, so client-go's
 * reflector sees the same answers it gets from kube-apiserver (it falls back from WatchList only on an error).
 */
import { parseFieldSelector, parseLabelSelector, type FieldSelector, type LabelSelector } from './selectors.js';
import { badRequest, invalid, type StatusCause } from './status.js';

export interface ListOptions {
  labelSelector: LabelSelector;
  fieldSelector: FieldSelector;
  /** 0 = no limit. */
  limit: number;
  continueToken: string | undefined;
  resourceVersion: string | undefined;
  resourceVersionMatch: 'NotOlderThan' | 'Exact' | undefined;
  watch: boolean;
  allowWatchBookmarks: boolean;
  sendInitialEvents: boolean | undefined;
  timeoutSeconds: number | undefined;
}

const truthy = (v: string | null) => v === 'true' || v === '1';

function boolParam(q: URLSearchParams, name: string): boolean | undefined {
  const v = q.get(name);
  if (v === null || v === '') return undefined;
  if (v === 'true' || v === '1') return true;
  if (v === 'false' || v === '0') return false;
  throw badRequest(`invalid value for ${name}: "${v}" (expected true or false)`);
}

function intParam(q: URLSearchParams, name: string): number | undefined {
  const v = q.get(name);
  if (v === null || v === '') return undefined;
  if (!/^\d+$/.test(v)) throw badRequest(`invalid value for ${name}: "${v}" (expected a non-negative integer)`);
  return Number(v);
}

export function parseListOptions(q: URLSearchParams, fieldsAllowed: readonly string[]): ListOptions {
  const rvm = q.get('resourceVersionMatch') || undefined;
  const opts: ListOptions = {
    labelSelector: parseLabelSelector(q.get('labelSelector')),
    fieldSelector: parseFieldSelector(q.get('fieldSelector'), fieldsAllowed),
    limit: intParam(q, 'limit') ?? 0,
    continueToken: q.get('continue') || undefined,
    resourceVersion: q.get('resourceVersion') ?? undefined,
    resourceVersionMatch: undefined,
    watch: truthy(q.get('watch')),
    allowWatchBookmarks: boolParam(q, 'allowWatchBookmarks') ?? false,
    sendInitialEvents: boolParam(q, 'sendInitialEvents'),
    timeoutSeconds: intParam(q, 'timeoutSeconds'),
  };
  const causes: StatusCause[] = [];
  const cause = (field: string, message: string) => causes.push({ reason: 'FieldValueForbidden', field, message });
  if (rvm !== undefined) {
    if (rvm !== 'NotOlderThan' && rvm !== 'Exact')
      causes.push({
        reason: 'FieldValueNotSupported',
        field: 'resourceVersionMatch',
        message: `Unsupported value: "${rvm}": supported values: "Exact", "NotOlderThan", ""`,
      });
    else opts.resourceVersionMatch = rvm;
  }
  const rv = opts.resourceVersion;
  if (opts.resourceVersionMatch) {
    // A WatchList may leave the version empty ("the most recent"); a list may not.
    if (!rv && !opts.watch)
      cause('resourceVersionMatch', 'Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided');
    if (opts.continueToken)
      cause('resourceVersionMatch', 'Forbidden: resourceVersionMatch is forbidden when continue is provided');
    if (opts.resourceVersionMatch === 'Exact' && rv === '0')
      cause('resourceVersionMatch', 'Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0"');
  }
  if (opts.watch) {
    if (opts.sendInitialEvents !== undefined) {
      if (opts.resourceVersionMatch !== 'NotOlderThan')
        cause(
          'resourceVersionMatch',
          'Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan',
        );
      if (!opts.allowWatchBookmarks)
        cause(
          'allowWatchBookmarks',
          'Forbidden: allowWatchBookmarks must be set to true when sendInitialEvents is set',
        );
    } else if (opts.resourceVersionMatch) {
      cause(
        'resourceVersionMatch',
        'Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided',
      );
    }
  } else if (opts.sendInitialEvents !== undefined) {
    cause('sendInitialEvents', 'Forbidden: sendInitialEvents is forbidden for list');
  }
  if (causes.length) throw invalid('ListOptions', 'meta.k8s.io', '', causes);
  return opts;
}
