import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { Agent, request as httpsRequest, type RequestOptions } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { KubeConfig } from '@kubernetes/client-node';
import { getTestCluster } from './cluster.js';

/**
 * An authenticating HTTP proxy in front of the test cluster's apiserver (as `kubectl proxy` is), through which a
 * client can be cut off or fed errors: `stall()` stops forwarding in both directions without closing anything
 * (requests get no answer, open watches go silent, as with a partitioned link or a SIGSTOPped kube-apiserver),
 * `resume()` lets everything held through (as SIGCONT would), `fail()` answers matching requests with 500. Clients
 * reach it through `kubeconfigPath` (plain HTTP on loopback, no credentials; the proxy holds the cluster's admin
 * certificate). By default it fronts the shared test cluster; `upstreamKubeconfig` names another.
 */
export interface FaultProxy {
  kubeconfigPath: string;
  stall(): void;
  /** Undo stall(): requests held since are forwarded, responses held resume. */
  resume(): void;
  /** Forward every request `ms` late from now on (0: at once): a slow kube-apiserver. */
  slow(ms: number): void;
  /** Answer requests for which `match` is true with a 500 Status until clear(). */
  fail(match: (method: string, path: string) => boolean): void;
  clear(): void;
  /** Requests answered with an injected 500 so far. */
  readonly injected: number;
  close(): Promise<void>;
}

interface Exchange {
  upstream?: IncomingMessage;
  res: ServerResponse;
}

export async function startFaultProxy(upstreamKubeconfig?: string): Promise<FaultProxy> {
  const kc = new KubeConfig();
  kc.loadFromFile(upstreamKubeconfig ?? (await getTestCluster()).kubeconfigPath);
  const upstreamUrl = new URL(kc.getCurrentCluster()!.server);
  const tls: RequestOptions = {};
  await kc.applyToHTTPSOptions(tls);
  const agent = new Agent({ keepAlive: true, ca: tls.ca, cert: tls.cert, key: tls.key });

  let stalled = false;
  let delayMs = 0;
  /** What stall() held back, in order: forwarded by resume(). */
  const held: Array<() => void> = [];
  let failing: ((method: string, path: string) => boolean) | undefined;
  let injected = 0;
  const open = new Set<Exchange>();
  const sockets = new Set<Socket>();

  const server = createServer((req, res) => {
    const ex: Exchange = { res };
    open.add(ex);
    res.on('close', () => open.delete(ex));
    // A stalled link answers nothing until resumed: the request is held (or the client gives up).
    if (stalled) {
      held.push(() => forward(req, res, ex));
      return;
    }
    if (delayMs > 0) setTimeout(() => forward(req, res, ex), delayMs);
    else forward(req, res, ex);
  });
  const forward = (req: IncomingMessage, res: ServerResponse, ex: Exchange) => {
    if (res.destroyed) return;
    const method = req.method ?? 'GET';
    const path = req.url ?? '/';
    if (failing?.(method, new URL(path, 'http://x').pathname)) {
      injected++;
      const body = JSON.stringify({
        kind: 'Status',
        apiVersion: 'v1',
        status: 'Failure',
        message: 'injected by the test fault proxy',
        reason: 'InternalError',
        code: 500,
      });
      res.writeHead(500, { 'content-type': 'application/json' }).end(body);
      return;
    }
    const up = httpsRequest(
      {
        host: upstreamUrl.hostname,
        port: upstreamUrl.port,
        path,
        method,
        headers: { ...req.headers, host: upstreamUrl.host },
        agent,
      },
      (upRes) => {
        ex.upstream = upRes;
        const answer = () => {
          res.writeHead(upRes.statusCode ?? 502, upRes.headers);
          upRes.pipe(res);
        };
        if (!stalled) return answer();
        upRes.pause();
        held.push(answer);
      },
    );
    up.on('error', () => res.destroy());
    req.pipe(up);
  };
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;

  const dir = await mkdtemp(join(tmpdir(), 'sbx-fault-proxy-'));
  const kubeconfigPath = join(dir, 'kubeconfig');
  await writeFile(
    kubeconfigPath,
    JSON.stringify({
      apiVersion: 'v1',
      kind: 'Config',
      // client-node refuses plain HTTP unless TLS verification is off; there is no TLS to verify on this hop.
      clusters: [{ name: 'proxy', cluster: { server: `http://127.0.0.1:${port}`, 'insecure-skip-tls-verify': true } }],
      users: [{ name: 'proxy', user: {} }],
      contexts: [{ name: 'proxy', context: { cluster: 'proxy', user: 'proxy' } }],
      'current-context': 'proxy',
    }),
  );

  return {
    kubeconfigPath,
    stall() {
      stalled = true;
      for (const ex of open) {
        const up = ex.upstream;
        if (!up) continue;
        up.unpipe(ex.res);
        up.pause();
        held.push(() => {
          up.pipe(ex.res);
          up.resume();
        });
      }
    },
    resume() {
      stalled = false;
      for (const f of held.splice(0)) f();
    },
    slow(ms) {
      delayMs = ms;
    },
    fail(match) {
      failing = match;
    },
    clear() {
      failing = undefined;
    },
    get injected() {
      return injected;
    },
    async close() {
      for (const s of sockets) s.destroy();
      for (const ex of open) ex.upstream?.destroy();
      await new Promise((r) => server.close(r));
      agent.destroy();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
