import { connect, type Socket } from 'node:net';

/**
 * A bare keep-alive HTTP/1.1 client: writes a pre-built request, reads one Content-Length-framed response. node:http's
 * client alone costs ~0.4 ms per request here, more than the server's work, so claim latency is measured with this
 * (and with node:http, reported next to it). One request in flight per connection.
 */
export class RawHttp {
  private buf: Buffer = Buffer.alloc(0);
  private waiter: ((r: { status: number; body: string }) => void) | undefined;
  private constructor(
    private readonly socket: Socket,
    private readonly token: string,
  ) {
    socket.setNoDelay(true);
    socket.on('data', (c: Buffer) => {
      this.buf = this.buf.length ? Buffer.concat([this.buf, c]) : c;
      this.parse();
    });
  }
  static open(port: number, token: string): Promise<RawHttp> {
    return new Promise((resolve, reject) => {
      const s = connect(port, '127.0.0.1', () => resolve(new RawHttp(s, token)));
      s.once('error', reject);
    });
  }
  private parse(): void {
    const end = this.buf.indexOf('\r\n\r\n');
    if (end < 0) return;
    const head = this.buf.subarray(0, end).toString('latin1');
    const len = Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? 0);
    if (this.buf.length < end + 4 + len) return;
    const body = this.buf.subarray(end + 4, end + 4 + len).toString();
    this.buf = this.buf.subarray(end + 4 + len);
    const w = this.waiter;
    this.waiter = undefined;
    w?.({ status: Number(head.slice(9, 12)), body });
  }
  post(path: string, body: string): Promise<{ status: number; body: string }> {
    return new Promise((resolve) => {
      this.waiter = resolve;
      this.socket.write(
        `POST ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${this.token}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
      );
    });
  }
  close(): void {
    this.socket.destroy();
  }
}
