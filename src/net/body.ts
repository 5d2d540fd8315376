import type { IncomingMessage } from 'node:http';

/**
 * A request body's chunks, capped at `limit` bytes: `tooLarge()` is thrown (as the rejection) once the body grows
 * past it, and the rest is drained unread. Event-driven rather than `for await`: the async iterator adds promise
 * hops to every request, and the claim paths are latency critical.
 */
export function collectBody(req: IncomingMessage, limit: number, tooLarge: () => Error): Promise<Buffer[]> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let failed = false;
    req.on('data', (chunk: Buffer) => {
      if (failed) return;
      size += chunk.length;
      if (size > limit) {
        failed = true;
        reject(tooLarge());
        return;
      }
      chunks.push(chunk);
    });
    req.on('error', (err) => {
      if (!failed) reject(err);
      failed = true;
    });
    req.on('end', () => {
      if (!failed) resolve(chunks);
    });
  });
}
