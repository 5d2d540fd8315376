import type { IncomingMessage } from 'node:http';

/**
 * A request body's chunks, capped at `limit` bytes: past it `tooLarge()` is the rejection and the rest is drained
 * unread. Up to 8 x `limit` in all the rejection waits for the body's end, so the answer (a 413) goes out on a
 * connection the client has finished writing to: answered and closed mid-body, a proxy in front (kube-aggregator)
 * fails its write with EPIPE and turns the 413 into a 503. Past that the rejection comes at once and the connection
 * is closed (closeIfBodyPending), so nobody streams us an unbounded body. Event-driven rather than `for await`: the
 * async iterator adds promise hops to every request, and the claim paths are latency critical.
 */
export function collectBody(req: IncomingMessage, limit: number, tooLarge: () => Error): Promise<Buffer[]> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let state: 'reading' | 'draining' | 'done' = 'reading';
    const fail = () => {
      if (state === 'done') return;
      state = 'done';
      reject(tooLarge());
    };
    req.on('data', (chunk: Buffer) => {
      if (state === 'done') return;
      size += chunk.length;
      if (state === 'draining') {
        if (size > limit * 8) fail();
        return;
      }
      if (size > limit) {
        chunks.length = 0;
        state = 'draining';
        if (size > limit * 8) fail();
        return;
      }
      chunks.push(chunk);
    });
    req.on('error', (err) => {
      if (state !== 'done') reject(err);
      state = 'done';
    });
    req.on('end', () => {
      if (state === 'reading') resolve(chunks);
      else fail();
    });
  });
}
