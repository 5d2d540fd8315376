/**
 * Two small pieces every plain-HTTP listener of the e2b planes needs: listening with the bind error as the
 * rejection, and splicing two byte streams (an upgraded connection and its upstream) until either side ends.
 */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';

export function listenOn(server: Server, host: string, port: number): Promise<AddressInfo> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve(server.address() as AddressInfo));
  });
}

/** Pipe `a` and `b` into each other; an error or close on either destroys both. */
export function splice(a: Duplex, b: Duplex): void {
  a.pipe(b).pipe(a);
  const end = () => {
    a.destroy();
    b.destroy();
  };
  for (const s of [a, b]) {
    s.on('error', end);
    s.on('close', end);
  }
}
