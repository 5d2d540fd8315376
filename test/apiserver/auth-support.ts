/**
 * A tiny HTTPS server that runs a request through an authenticator and an authorizer and answers what they
 * concluded (401 with the failure, 403 or 200 with the user, the RequestInfo, the decision and the headers left
 * on the request), plus the clients and certificates the auth tests call it with.
 */
import { readFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Agent, createServer, request, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import type { TLSSocket } from 'node:tls';
import type { Registry } from 'prom-client';
import { parseRequestInfo, requestUrl } from '../../src/apiserver/request-info.js';
import type {
  AuthorizationDecision,
  Authenticator,
  Authorizer,
  RequestInfo,
  UserInfo,
} from '../../src/apiserver/types.js';
import { issueCert, type CertPair } from '../../src/cluster/index.js';
import { createCertificateAuthority } from '../../src/pki/index.js';

export interface Seen {
  failure?: string;
  user?: UserInfo;
  info?: RequestInfo;
  decision?: AuthorizationDecision;
  headers?: Record<string, unknown>;
}

export interface TestServer {
  server: Server;
  port: number;
  /** How often the handlers asked a connection for its peer certificate. */
  peerCertificateReads(): number;
  close(): Promise<void>;
}

export interface TestServerOptions {
  serving: CertPair;
  /** The CAs to ask client certificates of ('' for none). */
  ca: string;
  host?: string;
  authn: () => Authenticator;
  authz: () => Authorizer;
}

export async function startTestServer(opts: TestServerOptions): Promise<TestServer> {
  let reads = 0;
  const server = createServer(
    {
      cert: readFileSync(opts.serving.cert),
      key: readFileSync(opts.serving.key),
      ...(opts.ca ? { ca: opts.ca } : {}),
      requestCert: true,
      rejectUnauthorized: false,
    },
    (req, res) => {
      const send = (code: number, body: Seen | { error: string }) => {
        res.writeHead(code, { 'content-type': 'application/json' });
        res.end(JSON.stringify(body));
      };
      void (async () => {
        const result = await opts.authn().authenticate(req);
        if (!result || 'failure' in result) return send(401, { failure: result?.failure ?? 'no result' });
        const info = parseRequestInfo(req.method ?? 'GET', requestUrl(req));
        const decision = await opts.authz().authorize(result.user, info);
        send(decision.allowed ? 200 : 403, { user: result.user, info, decision, headers: req.headers });
      })().catch((err: unknown) => send(500, { error: String(err) }));
    },
  );
  server.on('secureConnection', (socket: TLSSocket) => {
    const original = socket.getPeerCertificate.bind(socket);
    socket.getPeerCertificate = ((detailed: boolean) => {
      reads++;
      return original(detailed);
    }) as TLSSocket['getPeerCertificate'];
  });
  await new Promise<void>((resolve) => server.listen(0, opts.host ?? '127.0.0.1', resolve));
  return {
    server,
    port: (server.address() as AddressInfo).port,
    peerCertificateReads: () => reads,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export interface CallOptions {
  method?: string;
  /** A client certificate to present. */
  cert?: CertPair;
  headers?: Record<string, string | string[]>;
  /** A keep-alive agent, to send several requests on one connection. */
  agent?: Agent;
}

/** One request to the test server; `ca` verifies its serving certificate. */
export function call(
  port: number,
  ca: string,
  path: string,
  opts: CallOptions = {},
): Promise<{ status: number; body: Seen }> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        path,
        method: opts.method ?? 'GET',
        headers: opts.headers,
        ...(opts.agent
          ? { agent: opts.agent }
          : {
              agent: false,
              ca,
              ...(opts.cert ? { cert: readFileSync(opts.cert.cert), key: readFileSync(opts.cert.key) } : {}),
            }),
      },
      (res) => {
        let data = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (data += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(data) as Seen }));
      },
    );
    req.on('error', reject);
    req.end();
  });
}

export function keepAliveAgent(ca: string, cert?: CertPair): Agent {
  return new Agent({
    keepAlive: true,
    maxSockets: 1,
    ca,
    ...(cert ? { cert: readFileSync(cert.cert), key: readFileSync(cert.key) } : {}),
  });
}

/** A CA of our own (not the cluster's), written to `dir` so openssl can sign with it; optionally under `parent`. */
export async function rogueCa(
  dir: string,
  name: string,
  parent?: CertPair & { commonName: string },
): Promise<CertPair & { commonName: string }> {
  const ca = createCertificateAuthority(
    { commonName: name },
    { validityMs: 86_400_000 },
    parent ? { certPem: readFileSync(parent.cert, 'utf8'), keyPem: readFileSync(parent.key, 'utf8') } : undefined,
  );
  const pair = { cert: join(dir, `${name}.crt`), key: join(dir, `${name}.key`), commonName: name };
  await writeFile(pair.cert, ca.certPem);
  await writeFile(pair.key, ca.keyPem, { mode: 0o600 });
  return pair;
}

export async function clientCert(
  dir: string,
  ca: CertPair,
  name: string,
  cn: string,
  organization?: string,
): Promise<CertPair> {
  return issueCert(dir, ca, { name, commonName: cn, organization, usage: 'client' });
}

/** `rest_client_requests_total` for create on `resource`: how many reviews a KubeClient made. */
export async function createCalls(registry: Registry, resource: string): Promise<number> {
  const metric = await registry.getSingleMetric('rest_client_requests_total')?.get();
  return (metric?.values ?? [])
    .filter((v) => v.labels['verb'] === 'create' && v.labels['resource'] === resource)
    .reduce((sum, v) => sum + v.value, 0);
}
