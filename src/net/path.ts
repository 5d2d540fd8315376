/**
 * Percent-decoding of path segments taken from a request URL. `decodeURIComponent` throws a URIError on a malformed
 * escape (`/v1/sandboxes/%E0%A4%A`); left alone that reached the servers' catch-all as a 500 and an error log for
 * what is the client's mistake. `malformed` builds the listener's own 400 from the message naming the segment.
 */
export function decodeSegments(values: string[], malformed: (message: string) => Error): string[] {
  return values.map((v) => {
    try {
      return decodeURIComponent(v);
    } catch {
      throw malformed(`the path segment ${JSON.stringify(v)} has an invalid percent-encoding`);
    }
  });
}
