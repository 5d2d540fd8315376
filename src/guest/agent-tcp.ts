/**
 * TCP connections opened from inside the guest (`tcp.connect`), as a Duplex stream on the host: what
 * port-forward uses. Backpressure runs both ways: a write completes once the guest has credit for it, and data
 * the reader has not asked for holds back the guest's side of the socket (flow control, src/guest/flow.ts).
 */
import { Duplex } from 'node:stream';
import type { AgentClient } from './agent-client.js';
import { check, TcpEvent } from './agent-schemas.js';

const TCP_EVENT = check(TcpEvent);

/** Open a TCP connection from inside the guest to `host:port` (AgentClient.connectTcp). */
export async function connectGuestTcp(client: AgentClient, port: number, host: string): Promise<Duplex> {
  let connected!: () => void;
  const connectedP = new Promise<void>((r) => (connected = r));
  // eslint-disable-next-line prefer-const
  let duplex: Duplex;
  /** Set while the reader's buffer is full: the guest gets no more credit until read() asks for more. */
  let full: { promise: Promise<void>; resume: () => void } | undefined;
  const resume = () => {
    const f = full;
    full = undefined;
    f?.resume();
  };
  const { id, done } = client.start(
    'tcp.connect',
    { port, host },
    {
      timeoutMs: 0,
      event: TCP_EVENT,
      onEvent: connected,
      onOut: (b) => {
        if (duplex.push(b)) return undefined;
        if (!full) {
          let r!: () => void;
          full = { promise: new Promise<void>((res) => (r = res)), resume: r };
        }
        return full.promise;
      },
    },
  );
  const input = client.streamInput(id);
  duplex = new Duplex({
    write: (chunk: Buffer, _enc, cb) => {
      try {
        client.assertOpen();
        if (input.write(chunk)) cb();
        else void input.drained().then(() => cb());
      } catch (e) {
        cb(e as Error);
      }
    },
    final: (cb) => {
      try {
        client.assertOpen();
        input.end();
      } catch {
        /* connection gone */
      }
      cb();
    },
    read: resume,
    destroy: (e, cb) => {
      resume();
      if (!client.closed) client.start('cancel', { target: id }).done.catch(() => undefined);
      cb(e);
    },
  });
  let handedOut = false;
  done.then(
    () => duplex.push(null),
    // Until the caller has the stream, a failure is its rejection only: an 'error' on a stream nobody holds would
    // be an uncaught exception (a port-forward to a port nothing listens on took sandboxd down).
    (e: unknown) => (handedOut ? duplex.destroy(e as Error) : duplex.destroy()),
  );
  await Promise.race([connectedP, done]);
  handedOut = true;
  return duplex;
}
