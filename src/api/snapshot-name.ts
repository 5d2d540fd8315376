/**
 * The one rule for a snapshot's (a checkpoint's) name, on every path that takes one: sandboxd's checkpoint route,
 * sandbox-apiserver's `snapshot` verb and the e2b API's createSnapshot. A name ends up in a template directory's
 * name and in every listing, so it is bounded and plain: a DNS-1123 subdomain of at most 63 characters (the length
 * of a label, which e2b names and Kubernetes label values share). Before, a 240-byte name reached mkdir(2) and came
 * back as a 500 carrying the host path.
 */

export const MAX_SNAPSHOT_NAME_LENGTH = 63;

const SNAPSHOT_NAME_RE = /^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/;

/** What is wrong with `name` as a snapshot name, or undefined when it is fine. */
export function snapshotNameProblem(name: unknown): string | undefined {
  if (typeof name !== 'string') return 'must be a string';
  if (name.length === 0) return 'must not be empty';
  if (name.length > MAX_SNAPSHOT_NAME_LENGTH)
    return `must be no more than ${MAX_SNAPSHOT_NAME_LENGTH} characters (got ${name.length})`;
  if (!SNAPSHOT_NAME_RE.test(name))
    return "must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'before-upgrade')";
  return undefined;
}
