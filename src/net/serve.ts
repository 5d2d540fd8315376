/**
 * Small pieces every plain-HTTP listener of the e2b planes needs: the timeouts of a server whose requests stream,
 * listening with the bind error as the rejection, and splicing two byte streams (an upgraded connection and its
 * upstream) until either side ends.
 */
import type { Server, ServerOptions } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';

/**
 * Options of a server whose requests may stream for as long as the client likes (envd's process output, file
 * transfers, a proxied guest port): no whole-request deadline, but the headers must arrive within
 * `headersTimeout` (60 s). Node derives headersTimeout from requestTimeout when it is not given, so
 * `requestTimeout: 0` alone leaves a connection that never finishes its headers open for ever, and a client that
 * opens many holds the process's file descriptors without sending a token.
 */
export function streamingServerOptions(
  o: { headersTimeoutMs?: number; connectionsCheckingIntervalMs?: number } = {},
): ServerOptions {
  return {
    keepAliveTimeout: 90_000,
    requestTimeout: 0,
    headersTimeout: o.headersTimeoutMs ?? 60_000,
    ...(o.connectionsCheckingIntervalMs ? { connectionsCheckingInterval: o.connectionsCheckingIntervalMs } : {}),
  };
}

/**
 * Give an upgraded socket an error listener, first thing in an `upgrade` handler. Node removes the server's own from
 * a socket it hands to `upgrade`; without one, a client that resets the connection while it is being answered (a
 * lookup, an error reply, a dial) throws ECONNRESET as an uncaught exception, which ends the process.
 */
export function guardUpgradedSocket(socket: Duplex): void {
  socket.on('error', () => socket.destroy());
}

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
