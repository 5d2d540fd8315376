/**
 * e2b's auto-resume (the create's `autoResume: {enabled: true}`, JS `lifecycle.autoResume`): a request through the
 * router to a paused sandbox (memory-resident or hibernated) resumes it and is then served, instead of being
 * answered 502 "is paused". The resume is `connect`'s own (SandboxOps.connect: the node's resume verb, then the
 * lease), so a sandbox resumed either way is in the same state. What counts as a request that resumes, and what
 * does not, is in docs/e2b.md "Auto-resume".
 *
 * - Only a request the node would serve resumes: one with the sandbox's envd token, a valid signed `/files` URL, or,
 *   to another port, what that port accepts (public traffic, or a token). Anyone can name a sandbox (ids are in
 *   hosts and NodeInventory), so an unauthenticated request (a tokenless `/health`, a port scan of a private
 *   sandbox) must not make the platform hold a VM for the sandbox's lease; it is forwarded as before and the node
 *   answers 502 "is paused".
 * - Concurrent requests to one paused sandbox share one resume (keyed by claim id): an SDK's first call after a
 *   pause is often several at once (a command and its stream, a few file reads), and the node's resume of a VM
 *   already resuming is wasted work at best.
 * - The lease after an auto-resume is e2b's: the create's timeout, at least the default 5 minutes, from now (e2b
 *   docs "Timeout after auto-resume"); `setTimeout` changes it afterwards as on any sandbox.
 */
import type { IncomingMessage } from 'node:http';
import { Counter, type Registry } from 'prom-client';
import { isAuthorizedRequest } from '../../api/envd-access.js';
import { trafficAccessToken } from '../../api/envd.js';
import { CocoonAnnotationKeys, E2B_PUBLIC_TRAFFIC_ANNOTATION } from '../../api/keys.js';
import type { Logger } from '../../log/logger.js';
import type { SandboxEntry } from '../sandboxes/entry.js';
import { DEFAULT_TIMEOUT_SECONDS, MAX_TIMEOUT_SECONDS, type SandboxOps } from './sandbox-ops.js';
import { autoResumeOf, stateOf } from './views.js';

export interface AutoResumeOptions {
  /** The e2b API's sandbox operations (their `connect` is the resume). */
  ops: Pick<SandboxOps, 'refresh' | 'connect'>;
  logger: Logger;
  /** Where `sandbox_apiserver_e2b_auto_resumes_total` is registered (omitted: not counted). */
  registry?: Registry;
}

/** An answer the router gives instead of forwarding. */
export interface AutoResumeRefusal {
  status: number;
  body: string;
}

/** The lease an auto-resumed sandbox gets: its create's timeout, at least e2b's default (seconds). */
export function autoResumeTimeout(e: SandboxEntry): number {
  const raw = Number(e.object.metadata.annotations?.[CocoonAnnotationKeys.ttlSeconds]);
  const created = Number.isInteger(raw) && raw > 0 ? raw : 0;
  return Math.min(MAX_TIMEOUT_SECONDS, Math.max(DEFAULT_TIMEOUT_SECONDS, created));
}

export class AutoResumer {
  /** Resumes in progress by claim id; every request to that sandbox meanwhile waits for the same one. */
  private readonly inFlight = new Map<string, Promise<void>>();
  private readonly outcomes: Counter<'result'> | undefined;

  constructor(private readonly o: AutoResumeOptions) {
    this.outcomes = o.registry
      ? new Counter({
          name: 'sandbox_apiserver_e2b_auto_resumes_total',
          help: 'Resumes of paused e2b sandboxes on a request (autoResume), by result: resumed, running (found running by then), failed',
          labelNames: ['result'],
          registers: [o.registry],
        })
      : undefined;
  }

  /** How many resumes are in progress (each may have many requests waiting). */
  get pending(): number {
    return this.inFlight.size;
  }

  /**
   * Before a request to `port` of sandbox `e` is forwarded: when the sandbox is paused, has autoResume and the
   * request is one its node would serve, resume it (once for all the requests that wait) and answer undefined:
   * forward it. A resume that fails is the SDK's 502 `{code, message}` saying why. In every other case the answer
   * is undefined too, and the request goes on exactly as without auto-resume (the node answers a paused sandbox 502).
   */
  async beforeForward(req: IncomingMessage, e: SandboxEntry, port: number): Promise<AutoResumeRefusal | undefined> {
    if (stateOf(e) !== 'paused' || !autoResumeOf(e)) return undefined;
    let fresh: Awaited<ReturnType<SandboxOps['refresh']>>;
    try {
      // The node's row (the store may lag its feed) and the token that says who may wake it.
      fresh = await this.o.ops.refresh(e);
    } catch (err) {
      this.o.logger.debug({ err, sandbox: e.key }, 'e2b auto-resume: the node did not describe the sandbox');
      return undefined;
    }
    const { entry, envdToken } = fresh;
    if (stateOf(entry) !== 'paused') return undefined;
    const publicTraffic = entry.object.metadata.annotations?.[E2B_PUBLIC_TRAFFIC_ANNOTATION] === 'true';
    if (!isAuthorizedRequest(req, port, { publicTraffic, envdToken, trafficToken: trafficAccessToken(envdToken) }))
      return undefined;
    try {
      await this.resumeOnce(entry);
    } catch (err) {
      return refusal(
        entry.name,
        `The sandbox ${entry.name} is paused and could not be resumed: ${(err as Error).message}; resume it with Sandbox.connect`,
      );
    }
    // The client left while it waited: nothing to forward (the sandbox stays resumed, as a connect would leave it).
    if (req.socket.destroyed) return refusal(entry.name, 'the client went away while the sandbox resumed');
    return undefined;
  }

  private resumeOnce(e: SandboxEntry): Promise<void> {
    let p = this.inFlight.get(e.claimId);
    if (!p) {
      p = this.resume(e);
      this.inFlight.set(e.claimId, p);
      const done = () => void this.inFlight.delete(e.claimId);
      p.then(done, done);
    }
    return p;
  }

  private async resume(e: SandboxEntry): Promise<void> {
    const t0 = performance.now();
    const seconds = autoResumeTimeout(e);
    try {
      const { resumed } = await this.o.ops.connect(e.name, seconds);
      this.outcomes?.inc({ result: resumed ? 'resumed' : 'running' });
      this.o.logger.info(
        { sandbox: e.key, node: e.node, resumed, leaseSeconds: seconds, ms: Math.round(performance.now() - t0) },
        'e2b auto-resume: a request resumed a paused sandbox',
      );
    } catch (err) {
      // A resume by someone else (Sandbox.connect, the pause subresource's resume, another replica of this server)
      // between our read and our verb makes the node refuse ours ("it is running"): the request is served all the same.
      const now = await this.o.ops.refresh(e).catch(() => undefined);
      if (now && stateOf(now.entry) === 'running') {
        this.outcomes?.inc({ result: 'running' });
        return;
      }
      this.outcomes?.inc({ result: 'failed' });
      this.o.logger.warn({ err, sandbox: e.key, node: e.node }, 'e2b auto-resume: resuming the sandbox failed');
      throw err;
    }
  }
}

function refusal(id: string, message: string): AutoResumeRefusal {
  return { status: 502, body: JSON.stringify({ code: 502, message, sandboxId: id }) };
}
