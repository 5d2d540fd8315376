/**
 * envd (src/sandboxd/envd) in process in front of a hostile guest: a stand-in for the node engine holding one
 * claimed sandbox whose agent is whatever the test gives (a real AgentClient connected to a fake guest, or a TCP
 * dialer standing in for the guest's ports), and small HTTP helpers to call envd on 127.0.0.1.
 */
import { request, type IncomingHttpHeaders } from 'node:http';
import { connect, type Socket } from 'node:net';
import type { EnvdServerOptions } from '../../src/sandboxd/envd/server.js';
import { EnvdServer } from '../../src/sandboxd/envd/server.js';
import { NO_IDLE } from '../support/engine-stubs.js';

export interface FakeRecord {
  id: string;
  token: string;
  hibernated: boolean;
  object?: unknown;
}

/** The agent surface envd uses; tests stand in for part of it. */
export type FakeAgent = object;

/** An envd on 127.0.0.1 whose sandboxes are `recs`, each reached through `agent`. */
export async function startEnvd(
  recs: FakeRecord | FakeRecord[],
  agent: FakeAgent,
): Promise<{ envd: EnvdServer; port: number }> {
  const byId = new Map((Array.isArray(recs) ? recs : [recs]).map((r) => [r.id, r]));
  const engine = {
    on: () => undefined,
    get: (id: string) => byId.get(id),
    vm: () => ({ agent }),
    idle: NO_IDLE,
  };
  const envd = new EnvdServer({ engine } as unknown as EnvdServerOptions);
  const { port } = await envd.listen('127.0.0.1', 0);
  return { envd, port };
}

/** An agent whose TCP connects go to 127.0.0.1:<port> on this host: a guest's port, played by a local server. */
export const tcpAgent = {
  connectTcp: (port: number): Promise<Socket> =>
    new Promise((resolve, reject) => {
      const s = connect(port, '127.0.0.1');
      s.once('connect', () => resolve(s));
      s.once('error', reject);
    }),
};

export interface Answer {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
}

/** One request to envd; an answer, or the error of a connection cut off (never a hang: 10 s at most). */
export function call(
  port: number,
  path: string,
  headers: Record<string, string>,
  method = 'GET',
): Promise<Answer | Error> {
  return new Promise((resolve) => {
    const req = request({ host: '127.0.0.1', port, path, method, headers, agent: false, timeout: 10_000 }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (b: Buffer) => chunks.push(b));
      res.on('end', () =>
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString() }),
      );
      res.on('error', (e) => resolve(e));
    });
    req.on('timeout', () => req.destroy(new Error('envd did not answer within 10 s')));
    req.on('error', (e) => resolve(e));
    req.end();
  });
}
