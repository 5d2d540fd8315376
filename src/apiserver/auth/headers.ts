/**
 * Reading and removing credential headers on node's IncomingMessage. Repeated headers are read one value per
 * header line (headersDistinct), as Go's http.Header holds them: `headers` would join unknown repeated headers
 * with ", ", and a group name may itself contain a comma. Removal covers all three views node keeps (headers,
 * headersDistinct, rawHeaders), so no later reader, whichever view it uses, sees a credential or an identity
 * header that was consumed or refused.
 */
import type { IncomingMessage } from 'node:http';

/** Every value of one header (name lowercase), one per header line. */
export function headerValues(req: IncomingMessage, name: string): string[] {
  return req.headersDistinct[name] ?? [];
}

/** Remove every header whose lowercase name `matches`. */
export function removeHeaders(req: IncomingMessage, matches: (lowercaseName: string) => boolean): void {
  const { headers, headersDistinct, rawHeaders } = req; // reading the lazy views first fixes their contents
  for (const name of Object.keys(headers)) if (matches(name)) delete headers[name];
  for (const name of Object.keys(headersDistinct)) if (matches(name)) delete headersDistinct[name];
  for (let i = rawHeaders.length - 2; i >= 0; i -= 2)
    if (matches(rawHeaders[i]!.toLowerCase())) rawHeaders.splice(i, 2);
}
