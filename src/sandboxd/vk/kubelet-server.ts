/**
 * The kubelet API of one virtual node: HTTPS on the node's own port, clients authenticated by a certificate of
 * the cluster CA (the apiserver's `--kubelet-client-certificate`), requests without one get 401. Routes are the
 * kubelet's: `/exec`, `/containerLogs`, `/portForward`, `/run`, `/pods`, `/healthz`. exec and port-forward are
 * WebSocket upgrades: the node declares `ExtendWebSocketsToKubelet` in `status.declaredFeatures`, so the
 * apiserver (1.36) proxies kubectl's WebSocket straight here instead of translating it to SPDY. Port-forward
 * also takes the WebSocket channel protocol (client-node's) and plain SPDY, as the kubelet does.
 */
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { TLSSocket } from 'node:tls';
import { WebSocketServer, type WebSocket } from 'ws';
import { httpErrorOf } from '../../error-http.js';
import { SandboxError } from '../../errors.js';
import { guardRequests, guardUpgrades } from '../../net/guard.js';
import { decodeSegments } from '../../net/path.js';
import { requestTarget } from '../../net/request-target.js';
import { failureStatus } from '../../kube/index.js';
import type { Logger } from '../../log/logger.js';
import type { NodeEngine } from '../engine.js';
import { EXEC_PROTOCOLS, parseExecQuery, serveExec } from './exec-stream.js';
import type { PodLifecycle } from './pod-lifecycle.js';
import type { PodLogs } from './pod-logs.js';
import {
  PORT_FORWARD_PROTOCOLS,
  PORT_FORWARD_SPDY_PROTOCOL,
  servePortForward,
  servePortForwardOnSocket,
} from './port-forward.js';
import {
  parseChannelPorts,
  pickChannelProtocol,
  PORT_FORWARD_CHANNEL_PROTOCOLS,
  servePortForwardChannels,
} from './port-forward-channel.js';
import type { Pod } from './types.js';

export interface KubeletTls {
  /** PEM text or a file path. */
  cert: string;
  key: string;
  /** CA that signs the clients we accept (the cluster CA). */
  clientCa: string;
}

export interface KubeletServerOptions {
  nodeName: string;
  listenAddress: string;
  port: number;
  tls: KubeletTls;
  engine: NodeEngine;
  pods: PodLifecycle;
  logs: PodLogs;
  logger: Logger;
  /**
   * Which authenticated clients may use the API. @default CN `kube-apiserver-kubelet-client` or `kube-apiserver`,
   * or organization `system:masters`.
   */
  authorize?: (subject: { CN?: string; O?: string | string[] }) => boolean;
}

function statusBody(status: number, reason: string, message: string): string {
  return JSON.stringify(failureStatus(status, reason, message));
}

const messageOf = (err: unknown): string => (err instanceof Error ? err.message : String(err));

function pem(v: string): string {
  return v.includes('-----BEGIN') ? v : readFileSync(v, 'utf8');
}

const defaultAuthorize = (s: { CN?: string; O?: string | string[] }) => {
  const orgs = Array.isArray(s.O) ? s.O : s.O ? [s.O] : [];
  return s.CN === 'kube-apiserver-kubelet-client' || s.CN === 'kube-apiserver' || orgs.includes('system:masters');
};

/** The URL's path segments, percent-decoded; a malformed escape is the client's 400. */
function pathSegments(url: URL): string[] {
  return decodeSegments(
    url.pathname.split('/').filter(Boolean),
    (message) => new SandboxError('kubelet.bad-request', message),
  );
}

export class KubeletServer {
  private readonly server: Server;
  /** The subprotocol picked for each upgrade request (routing decides it before the handshake). */
  private readonly chosen = new WeakMap<IncomingMessage, string>();
  private readonly wss = new WebSocketServer({
    noServer: true,
    perMessageDeflate: false,
    maxPayload: 16 << 20,
    handleProtocols: (_offered, req) => this.chosen.get(req) ?? false,
  });
  private readonly log: Logger;
  private readonly sockets = new Set<Duplex>();

  constructor(private readonly opts: KubeletServerOptions) {
    this.log = opts.logger.child({ component: 'kubelet-api', node: opts.nodeName });
    this.server = createServer(
      {
        cert: pem(opts.tls.cert),
        key: pem(opts.tls.key),
        ca: pem(opts.tls.clientCa),
        requestCert: true,
        rejectUnauthorized: false,
      },
      guardRequests(this.log, 'kubelet-api', (req, res) => this.onRequest(req, res)),
    );
    this.server.on(
      'upgrade',
      guardUpgrades(this.log, 'kubelet-api', (req: IncomingMessage, socket: Duplex, head: Buffer) =>
        this.onUpgrade(req, socket, head),
      ),
    );
    this.server.on('secureConnection', (s) => {
      this.sockets.add(s);
      s.once('close', () => this.sockets.delete(s));
    });
    this.server.on('tlsClientError', (err) => this.log.debug({ err }, 'TLS handshake failed'));
  }

  async listen(): Promise<number> {
    await new Promise<void>((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(this.opts.port, this.opts.listenAddress, () => {
        this.server.off('error', reject);
        resolve();
      });
    });
    const addr = this.server.address();
    const port = typeof addr === 'object' && addr ? addr.port : this.opts.port;
    this.log.info({ address: this.opts.listenAddress, port }, 'kubelet API listening');
    return port;
  }

  async close(): Promise<void> {
    for (const ws of this.wss.clients) ws.terminate();
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  /** 401 without a client certificate of the cluster CA, 403 for an identity that may not use the kubelet API. */
  private authenticate(req: IncomingMessage): void {
    const sock = req.socket as TLSSocket;
    if (!sock.authorized)
      throw new SandboxError(
        'kubelet.unauthorized',
        `Unauthorized: a client certificate signed by the cluster CA is required (${String(sock.authorizationError ?? 'none presented')})`,
      );
    const subject = sock.getPeerCertificate().subject as { CN?: string; O?: string | string[] } | undefined;
    if (!subject || !(this.opts.authorize ?? defaultAuthorize)(subject))
      throw new SandboxError(
        'kubelet.forbidden',
        `Forbidden: ${subject?.CN ?? 'this client'} may not use the kubelet API of ${this.opts.nodeName}`,
      );
  }

  private async onRequest(req: IncomingMessage, res: ServerResponse): Promise<void> {
    try {
      this.authenticate(req);
      const url = requestTarget(req, (message) => new SandboxError('kubelet.bad-request', message));
      const parts = pathSegments(url);
      const [root] = parts;
      if (root === 'healthz' || root === 'readyz' || root === 'livez') {
        res.writeHead(200, { 'Content-Type': 'text/plain' }).end('ok');
        return;
      }
      if (root === 'pods' && parts.length === 1) {
        const items = this.opts.pods.podsOf(this.opts.nodeName);
        res
          .writeHead(200, { 'Content-Type': 'application/json' })
          .end(JSON.stringify({ kind: 'PodList', apiVersion: 'v1', metadata: {}, items }));
        return;
      }
      if (root === 'containerLogs' && parts.length === 4) {
        await this.serveLogs(parts[1]!, parts[2]!, parts[3]!, url.searchParams, req, res);
        return;
      }
      if (root === 'run' && (parts.length === 4 || parts.length === 5)) {
        // Like the kubelet: POST only (a GET is what a crafted link or a prefetch sends), and a stale UID is a 404.
        if (req.method !== 'POST')
          throw new SandboxError('kubelet.method-not-allowed', `/run takes POST, not ${req.method ?? 'GET'}`);
        const uid = parts.length === 5 ? parts[3] : undefined;
        await this.serveRun(parts[1]!, parts[2]!, uid, parts[parts.length - 1]!, url.searchParams, res);
        return;
      }
      if (root === 'exec' || root === 'attach' || root === 'portForward')
        throw new SandboxError(
          'kubelet.bad-request',
          `${root} needs a WebSocket upgrade (Upgrade: websocket); SPDY is not served by this kubelet`,
        );
      throw new SandboxError('kubelet.not-found', `no route for ${req.method ?? 'GET'} ${url.pathname}`);
    } catch (err) {
      const { status, reason } = httpErrorOf('kubelet', err);
      if (status >= 500) this.log.warn({ err }, 'kubelet API request failed');
      if (!res.headersSent) res.writeHead(status, { 'Content-Type': 'application/json' });
      res.end(statusBody(status, reason, messageOf(err)));
    }
  }

  private onUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    try {
      this.authenticate(req);
      const url = requestTarget(req, (message) => new SandboxError('kubelet.bad-request', message));
      const parts = pathSegments(url);
      const [root] = parts;
      const upgrade = (req.headers.upgrade ?? '').toLowerCase();
      const asleep =
        root === 'exec' || root === 'portForward' ? this.idleSuspendedClaim(parts[1], parts[2]) : undefined;
      if (asleep) {
        // Idle-suspended (src/sandboxd/idle.ts): the session waits for the wake, then is served as usual.
        socket.pause();
        void this.opts.engine.idle.ensureAwake(asleep).then(
          () => {
            socket.resume();
            this.onUpgrade(req, socket, head);
          },
          (err: unknown) => this.refuseUpgrade(req, socket, err),
        );
        return;
      }
      if (upgrade === 'spdy/3.1' && root === 'portForward' && (parts.length === 3 || parts.length === 4)) {
        // Older clients (and the apiserver's SPDY fallback): port-forward is SPDY either way, so serve it raw too.
        const versions = String(req.headers['x-stream-protocol-version'] ?? '')
          .split(',')
          .map((v) => v.trim());
        if (!versions.includes(PORT_FORWARD_SPDY_PROTOCOL))
          throw new SandboxError(
            'kubelet.bad-request',
            `X-Stream-Protocol-Version must offer ${PORT_FORWARD_SPDY_PROTOCOL}`,
          );
        const { claimId } = this.runningPod(parts[1] ?? '', parts[2] ?? '');
        const vm = this.opts.engine.vm(claimId);
        this.holdWhileOpen(claimId, socket);
        socket.write(
          `HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: ${PORT_FORWARD_SPDY_PROTOCOL}\r\n\r\n`,
        );
        this.log.info({ pod: `${parts[1]}/${parts[2]}`, transport: 'spdy' }, 'port-forward session');
        servePortForwardOnSocket(socket, head, vm, this.log);
        return;
      }
      if (upgrade !== 'websocket')
        throw new SandboxError(
          'kubelet.bad-request',
          `${root ?? ''} is served over WebSockets only (got Upgrade: ${req.headers.upgrade ?? ''})`,
        );
      const offered = (req.headers['sec-websocket-protocol'] ?? '')
        .split(',')
        .map((p) => p.trim())
        .filter(Boolean);
      if (root === 'exec' && (parts.length === 4 || parts.length === 5)) {
        const [, ns = '', name = ''] = parts;
        const container = parts[parts.length - 1]!;
        const protocol = EXEC_PROTOCOLS.find((p) => offered.includes(p));
        if (!protocol)
          throw new SandboxError(
            'kubelet.bad-request',
            `no supported exec subprotocol offered (${offered.join(', ') || 'none'}); supported: ${EXEC_PROTOCOLS.join(', ')}`,
          );
        const parsed = parseExecQuery(url.searchParams);
        if ('error' in parsed) throw new SandboxError('kubelet.bad-request', parsed.error);
        const { claimId } = this.runningPod(ns, name, container);
        const vm = this.opts.engine.vm(claimId);
        this.holdWhileOpen(claimId, socket);
        this.upgrade(req, socket, head, protocol, (ws) => {
          const log = this.log.child({ pod: `${ns}/${name}` });
          log.info({ tty: parsed.tty }, 'exec session');
          serveExec(ws, vm, parsed, log);
        });
        return;
      }
      if (root === 'portForward' && (parts.length === 3 || parts.length === 4)) {
        const [, ns = '', name = ''] = parts;
        // As the kubelet: the SPDY tunnel when offered at all, else the channel protocol (none offered = binary).
        const protocol = PORT_FORWARD_PROTOCOLS.find((p) => offered.includes(p));
        const channel = protocol ? undefined : pickChannelProtocol(offered);
        if (channel !== undefined) {
          const parsed = parseChannelPorts(url.searchParams);
          if ('error' in parsed) throw new SandboxError('kubelet.bad-request', parsed.error);
          const { pod, claimId } = this.runningPod(ns, name);
          const vm = this.opts.engine.vm(claimId);
          this.holdWhileOpen(claimId, socket);
          this.upgrade(req, socket, head, channel, (ws) => {
            const log = this.log.child({ pod: `${ns}/${name}` });
            log.info({ transport: channel || 'channel (binary)', ports: parsed.ports }, 'port-forward session');
            servePortForwardChannels(ws, channel, parsed.ports, vm, `${name}, uid ${pod.metadata.uid ?? ''}`, log);
          });
          return;
        }
        if (!protocol)
          throw new SandboxError(
            'kubelet.bad-request',
            `no supported port-forward subprotocol offered (${offered.join(', ')}); supported: ${[...PORT_FORWARD_PROTOCOLS, ...PORT_FORWARD_CHANNEL_PROTOCOLS].join(', ')}`,
          );
        const { claimId } = this.runningPod(ns, name);
        const vm = this.opts.engine.vm(claimId);
        this.holdWhileOpen(claimId, socket);
        this.upgrade(req, socket, head, protocol, (ws) => {
          this.log.info({ pod: `${ns}/${name}` }, 'port-forward session');
          servePortForward(ws, protocol, vm, url.searchParams, this.log);
        });
        return;
      }
      if (root === 'attach')
        throw new SandboxError(
          'kubelet.bad-request',
          'attach is not supported: a microVM pod has no main process to attach to; use kubectl exec',
        );
      throw new SandboxError('kubelet.not-found', `no route for upgrade ${url.pathname}`);
    } catch (err) {
      this.refuseUpgrade(req, socket, err);
    }
  }

  /** The claim of pod `<ns>/<name>` on this node when its idle policy has suspended it (src/sandboxd/idle.ts). */
  private idleSuspendedClaim(ns: string | undefined, name: string | undefined): string | undefined {
    const pod = ns && name ? this.opts.pods.pod(ns, name) : undefined;
    if (!pod || pod.spec.nodeName !== this.opts.nodeName) return undefined;
    const claim = this.opts.pods.claimOf(pod);
    const rec = claim ? this.opts.engine.get(claim.id) : undefined;
    return rec?.hibernated && rec.idleSuspended ? rec.id : undefined;
  }

  /** An exec or port-forward session is use of its sandbox while it is open, however quiet (idle.ts). */
  private holdWhileOpen(claimId: string, socket: Duplex): void {
    const done = this.opts.engine.idle.hold(claimId);
    socket.once('close', done);
  }

  private refuseUpgrade(req: IncomingMessage, socket: Duplex, err: unknown): void {
    const { status, reason } = httpErrorOf('kubelet', err);
    const message = messageOf(err);
    this.log.info(
      { path: req.url, upgrade: req.headers.upgrade, code: status, reason: message },
      'kubelet API upgrade refused',
    );
    const body = statusBody(status, reason, message);
    socket.end(
      `HTTP/1.1 ${status} ${reason}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    );
  }

  private upgrade(
    req: IncomingMessage,
    socket: Duplex,
    head: Buffer,
    protocol: string,
    then: (ws: WebSocket) => void,
  ): void {
    this.chosen.set(req, protocol);
    // `ws` validates offered subprotocols as RFC 7230 tokens, which `SPDY/3.1+portforward.k8s.io` is not (the
    // slash); routing already picked the protocol, so hand `ws` a placeholder and answer with the real name.
    req.headers['sec-websocket-protocol'] = 'negotiated';
    this.wss.handleUpgrade(req, socket, head, then);
  }

  /** The pod (bound to this node) and its claim; errors a kubelet would give otherwise. */
  private runningPod(namespace: string, name: string, container?: string): { pod: Pod; claimId: string } {
    const pod = this.opts.pods.pod(namespace, name);
    if (!pod || pod.spec.nodeName !== this.opts.nodeName)
      throw new SandboxError(
        'kubelet.not-found',
        `pod ${namespace}/${name} does not exist on node ${this.opts.nodeName}`,
      );
    if (container && !pod.spec.containers.some((c) => c.name === container))
      throw new SandboxError('kubelet.not-found', `container ${container} is not valid for pod ${name}`);
    const claim = this.opts.pods.claimOf(pod);
    if (!claim)
      throw new SandboxError(
        'kubelet.no-running-vm',
        `pod ${namespace}/${name} has no running microVM (see its status)`,
      );
    try {
      const state = this.opts.engine.vm(claim.id).state;
      if (state !== 'running')
        throw new SandboxError('kubelet.no-running-vm', `the microVM of pod ${namespace}/${name} is ${state}`);
    } catch (err) {
      if (err instanceof SandboxError && err.code === 'kubelet.no-running-vm') throw err;
      throw new SandboxError(
        'kubelet.no-running-vm',
        `pod ${namespace}/${name} has no running microVM: ${(err as Error).message}`,
      );
    }
    return { pod, claimId: claim.id };
  }

  private async serveLogs(
    ns: string,
    name: string,
    container: string,
    q: URLSearchParams,
    req: IncomingMessage,
    res: ServerResponse,
  ): Promise<void> {
    const pod = this.opts.pods.pod(ns, name);
    if (!pod || pod.spec.nodeName !== this.opts.nodeName)
      throw new SandboxError('kubelet.not-found', `pod ${ns}/${name} does not exist on node ${this.opts.nodeName}`);
    if (!pod.spec.containers.some((c) => c.name === container))
      throw new SandboxError('kubelet.not-found', `container ${container} is not valid for pod ${name}`);
    if (q.get('previous') === 'true')
      throw new SandboxError(
        'kubelet.bad-request',
        `previous terminated container "${container}" in pod "${name}" not found`,
      );
    const int = (k: string): number | undefined => {
      const v = q.get(k);
      if (v === null || v === '') return undefined;
      const n = Number(v);
      if (!Number.isInteger(n) || n < 0)
        throw new SandboxError('kubelet.bad-request', `${k}: must be a non-negative integer`);
      return n;
    };
    const sinceSeconds = int('sinceSeconds');
    const sinceTimeRaw = q.get('sinceTime');
    const sinceTime = sinceTimeRaw
      ? new Date(sinceTimeRaw)
      : sinceSeconds !== undefined
        ? new Date(Date.now() - sinceSeconds * 1000)
        : undefined;
    const ctrl = new AbortController();
    req.once('close', () => ctrl.abort());
    res.writeHead(200, { 'Content-Type': 'text/plain; charset=utf-8', 'Transfer-Encoding': 'chunked' });
    const limitBytes = int('limitBytes');
    const tailLines = int('tailLines');
    await this.opts.logs.serve(this.opts.pods.logFile(pod), res, {
      follow: q.get('follow') === 'true' || q.get('follow') === '1',
      timestamps: q.get('timestamps') === 'true' || q.get('timestamps') === '1',
      signal: ctrl.signal,
      ...(limitBytes !== undefined ? { limitBytes } : {}),
      ...(tailLines !== undefined ? { tailLines } : {}),
      ...(sinceTime && !Number.isNaN(sinceTime.getTime()) ? { sinceTime } : {}),
    });
    res.end();
  }

  /** The kubelet's `/run` (POST, `cmd` split on spaces): run to completion, answer stdout. */
  private async serveRun(
    ns: string,
    name: string,
    uid: string | undefined,
    container: string,
    q: URLSearchParams,
    res: ServerResponse,
  ): Promise<void> {
    const asleep = this.idleSuspendedClaim(ns, name);
    if (asleep) await this.opts.engine.idle.ensureAwake(asleep);
    const { pod, claimId } = this.runningPod(ns, name, container);
    if (uid !== undefined && pod.metadata.uid !== uid)
      throw new SandboxError(
        'kubelet.not-found',
        `pod ${ns}/${name} with UID ${uid} does not exist on node ${this.opts.nodeName}`,
      );
    const cmd = (q.get('cmd') ?? '').split(' ').filter(Boolean);
    if (!cmd.length) throw new SandboxError('kubelet.bad-request', 'cmd: required');
    const done = this.opts.engine.idle.hold(claimId);
    const r = await this.opts.engine.vm(claimId).run(cmd, { timeoutMs: 60_000 }).finally(done);
    res.writeHead(200, { 'Content-Type': 'text/plain' }).end(Buffer.concat([r.stdout, r.stderr]));
  }
}
