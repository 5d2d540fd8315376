/**
 * What every envd RPC handler gets from the listener (server.ts), which resolved the sandbox and checked the access
 * token before the Connect router saw the request: the sandbox's context, and helpers for the acting user.
 */
import { Code, ConnectError, createContextKey, type HandlerContext } from '@connectrpc/connect';
import type { SandboxContext } from './sandbox-context.js';
import { basicAuthUser, resolveUser, type GuestUser } from './users.js';
import type { AgentClient } from '../../guest/index.js';

export const SANDBOX_KEY = createContextKey<SandboxContext | undefined>(undefined, { description: 'envd sandbox' });

export interface Acting {
  sandbox: SandboxContext;
  agent: AgentClient;
  user: GuestUser;
}

/** The sandbox, its agent and the acting user (Basic auth's user name, else the default user) of an RPC. */
export async function acting(ctx: HandlerContext): Promise<Acting> {
  const sandbox = ctx.values.get(SANDBOX_KEY);
  if (!sandbox) throw new ConnectError('no sandbox resolved for this request', Code.Internal);
  const agent = sandbox.agent();
  const user = await resolveUser(agent, basicAuthUser(ctx.requestHeader.get('authorization')));
  return { sandbox, agent, user };
}

/** The stream's keepalive period: the client's Keepalive-Ping-Interval (seconds), else 50 s, at least 1 s. */
export function keepaliveMs(ctx: HandlerContext): number {
  const v = Number(ctx.requestHeader.get('keepalive-ping-interval'));
  return (Number.isFinite(v) && v >= 1 && v <= 3600 ? v : 50) * 1000;
}

/**
 * How close to its Connect-Timeout-Ms a disconnect counts as the deadline: the SDK aborts on its own timer, started
 * before the request reached us, so its disconnect usually beats our deadline by the request's transit time.
 */
const DEADLINE_SLACK_MS = 2000;

/** Whether the handler's signal fired because the client's Connect-Timeout-Ms passed (not a plain disconnect). */
export function deadlinePassed(ctx: HandlerContext): boolean {
  if (!ctx.signal.aborted) return false;
  if (ConnectError.from(ctx.signal.reason).code === Code.DeadlineExceeded) return true;
  const left = ctx.timeoutMs();
  return left !== undefined && left <= DEADLINE_SLACK_MS;
}
