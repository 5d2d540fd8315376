/**
 * A raw client of the kubelet's WebSocket channel port-forward protocol (docs/virtual-kubelet.md "port-forward:
 * the WebSocket channel protocol"), for tests that look at the frames themselves: it dials the kubelet API
 * directly with a client certificate and records every message by channel.
 */
import { readFileSync } from 'node:fs';
import { WebSocket } from 'ws';

export interface ChannelClient {
  ws: WebSocket;
  /** The subprotocol the server answered ('' for none). */
  protocol: string;
  /** Every message received, decoded: channel and payload (base64 undone). */
  frames: Array<{ channel: number; data: Buffer }>;
  /** The bytes of one channel so far, without its 2-byte port prefix. */
  channel(n: number): Buffer;
  /** Send bytes on a channel (binary, or base64 text under the base64 protocol). */
  send(channel: number, data: Buffer | string): void;
  closed: Promise<{ code: number; reason: string }>;
}

export interface ChannelDial {
  host: string;
  port: number;
  path: string;
  protocols: string[];
  ca: string;
  cert: string;
  key: string;
}

/** Open the WebSocket; rejects with the HTTP status and body if the upgrade is refused. */
export function dialChannels(o: ChannelDial): Promise<ChannelClient> {
  const ws = new WebSocket(`wss://${o.host}:${o.port}${o.path}`, o.protocols, {
    ca: readFileSync(o.ca),
    cert: readFileSync(o.cert),
    key: readFileSync(o.key),
    perMessageDeflate: false,
  });
  const frames: ChannelClient['frames'] = [];
  const closed = new Promise<{ code: number; reason: string }>((resolve) =>
    ws.on('close', (code, reason) => resolve({ code, reason: reason.toString() })),
  );
  ws.on('message', (raw: Buffer, binary: boolean) => {
    if (!raw.length) return;
    if (binary) frames.push({ channel: raw[0]!, data: raw.subarray(1) });
    else {
      const text = raw.toString('utf8');
      frames.push({ channel: (text.charCodeAt(0) - 48) & 0xff, data: Buffer.from(text.slice(1), 'base64') });
    }
  });
  return new Promise((resolve, reject) => {
    ws.once('unexpected-response', (_req, res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () =>
        reject(
          Object.assign(new Error(`${res.statusCode}: ${Buffer.concat(chunks).toString()}`), {
            status: res.statusCode,
          }),
        ),
      );
    });
    ws.once('error', reject);
    ws.once('open', () => {
      const base64 = ws.protocol.includes('base64');
      resolve({
        ws,
        protocol: ws.protocol,
        frames,
        closed,
        channel: (n) => Buffer.concat(frames.filter((f) => f.channel === n).map((f) => f.data)).subarray(2),
        send: (channel, data) => {
          const b = Buffer.from(data);
          if (base64) ws.send(String.fromCharCode(48 + channel) + b.toString('base64'));
          else ws.send(Buffer.concat([Buffer.of(channel), b]));
        },
      });
    });
  });
}
