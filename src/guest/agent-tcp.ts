/**
 * TCP connections opened from inside the guest (`tcp.connect`), as a Duplex stream on the host: what
 * port-forward uses.
 */
import { Duplex } from 'node:stream';
import type { AgentClient } from './agent-client.js';
import { FrameType, MAX_PAYLOAD } from './protocol.js';

/** Open a TCP connection from inside the guest to `host:port` (AgentClient.connectTcp). */
export async function connectGuestTcp(client: AgentClient, port: number, host: string): Promise<Duplex> {
  let connected!: () => void;
  const connectedP = new Promise<void>((r) => (connected = r));
  // eslint-disable-next-line prefer-const
  let duplex: Duplex;
  const { id, done } = client.start(
    'tcp.connect',
    { port, host },
    {
      timeoutMs: 0,
      onEvent: (e) => {
        if (e.type === 'connected') connected();
      },
      onOut: (b) => duplex.push(b),
    },
  );
  duplex = new Duplex({
    write: (chunk: Buffer, _enc, cb) => {
      try {
        for (let off = 0; off < chunk.length; off += MAX_PAYLOAD)
          client.sendRaw(FrameType.In, id, chunk.subarray(off, off + MAX_PAYLOAD));
        cb();
      } catch (e) {
        cb(e as Error);
      }
    },
    final: (cb) => {
      try {
        client.sendRaw(FrameType.In, id, Buffer.alloc(0));
      } catch {
        /* connection gone */
      }
      cb();
    },
    read: () => undefined,
    destroy: (e, cb) => {
      if (!client.closed) client.start('cancel', { target: id }).done.catch(() => undefined);
      cb(e);
    },
  });
  done.then(
    () => duplex.push(null),
    (e: unknown) => duplex.destroy(e as Error),
  );
  await Promise.race([connectedP, done]);
  return duplex;
}
