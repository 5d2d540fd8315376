import { Agent, request, type IncomingMessage } from 'node:http';

/**
 * HTTP calls from this node to its peers (owner probes, record pulls, forwarded deletes), authenticated with the
 * fleet's root token: one value across the fleet (docs/placement.md "Peers"), which peers accept on their operator
 * routes. Keep-alive, so a probe round costs no handshakes.
 */
export class PeerClient {
  private readonly agent = new Agent({ keepAlive: true, maxSockets: 8 });

  constructor(private readonly token: string | undefined) {}

  private url(peer: string, path: string): string {
    return `${peer.includes('://') ? peer : `http://${peer}`}${path}`;
  }

  /** The response of one request once its headers arrived; the caller reads or discards the body. */
  open(
    peer: string,
    method: string,
    path: string,
    opts: { signal?: AbortSignal; timeoutMs?: number } = {},
  ): Promise<IncomingMessage> {
    return new Promise((resolve, reject) => {
      const req = request(this.url(peer, path), {
        method,
        agent: this.agent,
        signal: opts.signal,
        headers: this.token ? { authorization: `Bearer ${this.token}` } : {},
        ...(opts.timeoutMs ? { timeout: opts.timeoutMs } : {}),
      });
      req.on('response', resolve);
      req.on('error', reject);
      req.on('timeout', () => req.destroy(new Error(`no answer from ${peer} within ${opts.timeoutMs} ms`)));
      req.end();
    });
  }

  /** A request whose body does not matter: its status (the body is read and dropped, so the socket is reused). */
  async status(peer: string, method: string, path: string, timeoutMs: number): Promise<number> {
    const res = await this.open(peer, method, path, { timeoutMs });
    res.resume();
    return res.statusCode ?? 0;
  }

  /** A GET whose answer is JSON, at most `maxBytes` of it; a non-2xx answer is an error naming the peer's message. */
  async json(peer: string, path: string, timeoutMs: number, maxBytes = 4 << 20): Promise<unknown> {
    const res = await this.open(peer, 'GET', path, { timeoutMs });
    const status = res.statusCode ?? 0;
    if (status < 200 || status >= 300)
      throw new Error(`${peer} answered ${status}: ${await PeerClient.errorText(res)}`);
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const c of res as AsyncIterable<Buffer>) {
      size += c.length;
      if (size > maxBytes) {
        res.destroy();
        throw new Error(`${peer} answered more than ${maxBytes} bytes to GET ${path.split('?')[0]}`);
      }
      chunks.push(c);
    }
    return JSON.parse(Buffer.concat(chunks).toString('utf8')) as unknown;
  }

  /**
   * Delete checkpoint `id` on each of `peers` (best effort, in parallel, `no_forward` so it goes no further):
   * whether any of them had it. A peer that is down or fails is passed to `failed` and keeps its copy until
   * --checkpoint-ttl-hours ages it out.
   */
  async deleteCheckpointOn(
    peers: string[],
    id: string,
    failed: (peer: string, err: unknown) => void,
  ): Promise<boolean> {
    const path = `/v1/checkpoints/${encodeURIComponent(id)}?no_forward=1`;
    const answers = await Promise.all(
      peers.map((peer) =>
        this.status(peer, 'DELETE', path, 2000).catch((err: unknown) => {
          failed(peer, err);
          return 0;
        }),
      ),
    );
    return answers.includes(204);
  }

  /** A short error body (what the peer said), at most 4 KiB of it. */
  static async errorText(res: IncomingMessage): Promise<string> {
    let text = '';
    for await (const c of res as AsyncIterable<Buffer>) {
      if (text.length < 4096) text += c.toString('utf8');
    }
    try {
      return String((JSON.parse(text) as { error?: unknown }).error ?? text);
    } catch {
      return text.slice(0, 4096);
    }
  }

  close(): void {
    this.agent.destroy();
  }
}
