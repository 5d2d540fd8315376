/**
 * The one way every HTTP listener of this project reads a request-target (issue 28, item 1). `new URL(req.url,
 * base)` reads a target that starts with `//` as an authority: `//` and `//@` throw ERR_INVALID_URL, `//evil/x`
 * becomes host `evil`, path `/x`. Called outside a handler's error handling, that throw ended sandbox-apiserver,
 * sandboxd and the operator with one unauthenticated request. Here the target is appended to a fixed origin, so
 * it is always a path; anything that is not origin-form (`*`, an absolute URL, garbage) is the client's 400.
 */
import type { IncomingMessage } from 'node:http';

/** The base every target is resolved against: a name that resolves nowhere, never dialled. */
const ORIGIN = 'http://request-target.invalid';

/**
 * The request's URL (its `pathname`, `searchParams`...), with dot segments resolved and `\` read as `/`, as WHATWG
 * URL parsing does for http. `malformed` builds the listener's own 400 from a message naming the target; call this
 * inside the handler's error handling (it throws only that).
 */
export function requestTarget(req: Pick<IncomingMessage, 'url'>, malformed: (message: string) => Error): URL {
  const raw = req.url ?? '';
  if (!raw.startsWith('/'))
    throw malformed(`request target ${JSON.stringify(raw.slice(0, 100))} is not a path (origin-form, e.g. /v1/x)`);
  try {
    return new URL(ORIGIN + raw);
  } catch {
    // Not reachable for a target starting with '/' today (the authority is fixed); kept so that a URL parser change
    // becomes a 400 and not a crash.
    throw malformed(`request target ${JSON.stringify(raw.slice(0, 100))} is not a valid path`);
  }
}
