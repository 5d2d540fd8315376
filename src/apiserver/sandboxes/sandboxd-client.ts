/**
 * The apiserver's client of the sandboxd HTTP API (docs/sandboxd-api.md): the fleet's root token, one keep-alive
 * agent for every node (a claim must not pay a TCP handshake), every call bounded by a timeout, error bodies read
 * up to 64 KiB. src/apiserver speaks to sandboxd only through here, never by importing it.
 */
import { Agent, request, type IncomingMessage } from 'node:http';
import { relayUpstreamError } from '../../error-http.js';
import { SandboxError } from '../../errors.js';
import { silentLogger, type Logger } from '../../log/logger.js';
import type { VmNetworkPolicy } from '../../api/vm-network.js';
import type { NodeRow, StoredObject } from './entry.js';

export interface ClaimBody {
  template: string;
  net: string;
  size: string;
  ttl_seconds?: number;
  /** At the lease's end: release (default) or hibernate. */
  on_expiry?: 'hibernate' | 'pause-filesystem';
  /** Idle policy: hibernate after this many seconds without use (docs/sandboxd.md "Idle suspend"). */
  idle_hibernate_seconds?: number;
  claim_ref: string;
  /** Answer only for this node: no redirect to peers. */
  no_redirect: true;
  /**
   * true: only a warm VM, a miss is a 429, never a clone on the claim path (the server tries another node); false: a
   * miss clones (or boots) one, for a create that provisions on a miss (CreateRequest.provisionOnMiss).
   */
  warm_only: boolean;
  object: StoredObject;
  /** The egress policy (docs/sandboxd-api.md "Network policy"); absent: the secure default. */
  network?: VmNetworkPolicy;
}

export interface ClaimAnswer {
  id: string;
  token: string;
  deadline: string;
  owner_addr: string;
  sandbox: NodeRow;
}

/**
 * A node answered with an HTTP error (status and its `{"error"}` message). The message of a 5xx is not the node's
 * (error-http.ts relayUpstreamError): every caller relays `message` to its client, so the node's text is logged
 * when the answer arrives and the message names the incident instead.
 */
export class NodeHttpError extends SandboxError {
  constructor(
    readonly node: string,
    readonly status: number,
    message: string,
    /** The node's error code on a 4xx (`sandboxd.at-capacity`, `sandboxd.draining`, …), when it sent one. */
    readonly nodeCode?: string,
  ) {
    super('sandboxd.http', `node ${node}: HTTP ${status}: ${message}`);
  }
}

/** The node could not be reached or did not answer in time (the request may or may not have taken effect). */
export class NodeUnreachableError extends SandboxError {
  constructor(
    readonly node: string,
    message: string,
    readonly timedOut: boolean,
  ) {
    super('sandboxd.unreachable', `node ${node}: ${message}`);
  }
}

const MAX_ERROR_BODY = 64 << 10;
const MAX_BODY = 16 << 20;

export interface SandboxdClientOptions {
  token: string | undefined;
  timeoutMs?: number;
  /** Where a node's 5xx texts go (they are withheld from clients). */
  log?: Logger;
}

export class SandboxdClient {
  readonly agent = new Agent({ keepAlive: true, maxSockets: 64, maxFreeSockets: 32, keepAliveMsecs: 30_000 });
  private readonly timeoutMs: number;

  constructor(private readonly opts: SandboxdClientOptions) {
    this.timeoutMs = opts.timeoutMs ?? 10_000;
  }

  close(): void {
    this.agent.destroy();
  }

  headers(extra: Record<string, string | number> = {}): Record<string, string | number> {
    return { ...(this.opts.token ? { authorization: `Bearer ${this.opts.token}` } : {}), ...extra };
  }

  claim(node: string, address: string, body: ClaimBody, timeoutMs?: number): Promise<ClaimAnswer> {
    return this.call(node, address, 'POST', '/v1/claim', body, timeoutMs) as Promise<ClaimAnswer>;
  }

  /** 404 (already gone) counts as released. */
  async release(node: string, address: string, claimId: string): Promise<void> {
    try {
      await this.call(node, address, 'POST', `/v1/sandboxes/${encodeURIComponent(claimId)}/release`);
    } catch (err) {
      if (err instanceof NodeHttpError && err.status === 404) return;
      throw err;
    }
  }

  /** The error of a node's answer; a 5xx's text is logged here under an incident id and withheld from callers. */
  private httpError(node: string, status: number, body: string, method: string, path: string): NodeHttpError {
    const { text, code } = errorOf(body);
    const relayed = relayUpstreamError(status, text, `${method} ${path.split('?')[0]}`);
    if (relayed.incident)
      (this.opts.log ?? silentLogger).error(
        { node, status, method, path, incident: relayed.incident, error: text },
        'a node answered with a server error; the client gets the incident id only',
      );
    return new NodeHttpError(node, status, relayed.message, relayed.incident ? undefined : code);
  }

  /** One JSON request to a node; resolves with the parsed body (undefined for 204). */
  call(
    node: string,
    address: string,
    method: string,
    path: string,
    body?: unknown,
    timeoutMs = this.timeoutMs,
  ): Promise<unknown> {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const headers = this.headers(
      payload === undefined ? {} : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) },
    );
    return new Promise((resolve, reject) => {
      const req = request(
        `http://${address}${path}`,
        { method, agent: this.agent, headers, timeout: timeoutMs },
        (res) => {
          readBody(res, res.statusCode && res.statusCode >= 300 ? MAX_ERROR_BODY : MAX_BODY).then((text) => {
            const status = res.statusCode ?? 0;
            if (status < 200 || status >= 300) return reject(this.httpError(node, status, text, method, path));
            if (!text) return resolve(undefined);
            try {
              resolve(JSON.parse(text));
            } catch {
              reject(new NodeUnreachableError(node, `invalid JSON from ${method} ${path}`, false));
            }
          }, reject);
        },
      );
      req.on('timeout', () =>
        req.destroy(new NodeUnreachableError(node, `no answer to ${method} ${path} within ${timeoutMs} ms`, true)),
      );
      req.on('error', (err) =>
        reject(err instanceof NodeUnreachableError ? err : new NodeUnreachableError(node, err.message, false)),
      );
      req.end(payload);
    });
  }
}

/** A node's `{"error", "code"}` answer; a body that is not one is its own text (cut), without a code. */
function errorOf(body: string): { text: string; code?: string } {
  try {
    const v = JSON.parse(body) as { error?: unknown; code?: unknown };
    if (typeof v.error === 'string')
      return { text: v.error, ...(typeof v.code === 'string' ? { code: v.code.slice(0, 100) } : {}) };
  } catch {
    // not JSON: the text itself
  }
  return { text: body.slice(0, 500) || 'no message' };
}

function readBody(res: IncomingMessage, limit: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    res.on('data', (c: Buffer) => {
      size += c.length;
      if (size <= limit) chunks.push(c);
    });
    res.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    res.on('error', reject);
  });
}
