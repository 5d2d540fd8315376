/**
 * envd's `process.Process` service over the guest agent: Start (a command or a pty, its events streamed), Connect
 * (a running process's events), List, SendInput / StreamInput (stdin or pty bytes), SendSignal, CloseStdin and
 * Update (pty size). A Start whose Connect-Timeout-Ms passes kills its process and ends with deadline_exceeded (the
 * SDK's command timeout); a client that disconnects leaves the process running, as envd does.
 */
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from '@connectrpc/connect';
import { Process, Signal, type ProcessSelector } from './gen/process.gen.js';
import { acting, deadlinePassed, keepaliveMs } from './request-context.js';
import type { EventQueue } from './event-queue.js';
import type { GuestProcess, ProcessEventInit } from './processes.js';
import { resolvePath, type GuestUser } from './users.js';
import { toConnectError } from './errors.js';

function selector(sel: ProcessSelector | undefined) {
  const s = sel?.selector;
  if (!s || s.case === undefined) return { case: undefined } as const;
  return s;
}

/** What every command's environment starts from: the acting user's identity. */
function userEnv(user: GuestUser): Record<string, string> {
  return { HOME: user.home, USER: user.name, LOGNAME: user.name };
}

/** Stream a process's events; the stream's end (client gone, deadline) stops the queue, a deadline the process. */
async function* streamEvents(
  ctx: HandlerContext,
  proc: GuestProcess,
  events: EventQueue<ProcessEventInit>,
  killOnDeadline: boolean,
) {
  const onAbort = () => {
    if (deadlinePassed(ctx)) {
      if (killOnDeadline) proc.exec.kill('SIGKILL').catch(() => undefined);
      events.close(new ConnectError('the command did not finish within its timeout', Code.DeadlineExceeded));
    } else events.close();
  };
  if (ctx.signal.aborted) onAbort();
  else ctx.signal.addEventListener('abort', onAbort, { once: true });
  try {
    yield { event: { event: { case: 'start' as const, value: { pid: proc.pid } } } };
    for await (const ev of events) yield { event: { event: ev } };
  } finally {
    ctx.signal.removeEventListener('abort', onAbort);
  }
}

export const processService: Partial<ServiceImpl<typeof Process>> = {
  async *start(req, ctx) {
    const { sandbox, agent, user } = await acting(ctx);
    const cfg = req.process;
    if (!cfg?.cmd) throw new ConnectError('process.cmd: required', Code.InvalidArgument);
    const size = req.pty?.size;
    const { proc, events } = await sandbox.processes.start(
      agent,
      {
        config: {
          cmd: cfg.cmd,
          args: [...cfg.args],
          envs: { ...cfg.envs },
          ...(cfg.cwd !== undefined ? { cwd: cfg.cwd } : {}),
        },
        env: { ...userEnv(user), ...sandbox.env, ...cfg.envs },
        cwd: cfg.cwd ? resolvePath(cfg.cwd, user) : user.home,
        uid: user.uid,
        gid: user.gid,
        ...(req.tag !== undefined ? { tag: req.tag } : {}),
        stdin: req.stdin === true,
        ...(req.pty ? { pty: { cols: size?.cols || 80, rows: size?.rows || 24 } } : {}),
      },
      keepaliveMs(ctx),
    );
    yield* streamEvents(ctx, proc, events, true);
  },

  async *connect(req, ctx) {
    const { sandbox } = await acting(ctx);
    const proc = sandbox.processes.find(selector(req.process));
    yield* streamEvents(ctx, proc, proc.subscribe(keepaliveMs(ctx)), false);
  },

  async list(_req, ctx) {
    const { sandbox } = await acting(ctx);
    return {
      processes: sandbox.processes.list().map((p) => ({
        config: p.spec.config,
        pid: p.pid,
        ...(p.tag !== undefined ? { tag: p.tag } : {}),
      })),
    };
  },

  async sendInput(req, ctx) {
    const { sandbox } = await acting(ctx);
    const proc = sandbox.processes.find(selector(req.process));
    await writeInput(proc, req.input?.input);
    return {};
  },

  async streamInput(reqs, ctx) {
    const { sandbox } = await acting(ctx);
    let proc: GuestProcess | undefined;
    for await (const msg of reqs) {
      const ev = msg.event;
      if (ev.case === 'start') proc = sandbox.processes.find(selector(ev.value.process));
      else if (ev.case === 'data') {
        if (!proc) throw new ConnectError('the first message must be start', Code.InvalidArgument);
        await writeInput(proc, ev.value.input?.input);
      }
    }
    return {};
  },

  async sendSignal(req, ctx) {
    const { sandbox } = await acting(ctx);
    const proc = sandbox.processes.find(selector(req.process));
    if (req.signal !== Signal.SIGKILL && req.signal !== Signal.SIGTERM)
      throw new ConnectError('signal: must be SIGNAL_SIGKILL or SIGNAL_SIGTERM', Code.InvalidArgument);
    await proc.exec.kill(req.signal).catch((err: unknown) => {
      throw toConnectError(err);
    });
    return {};
  },

  async closeStdin(req, ctx) {
    const { sandbox } = await acting(ctx);
    const proc = sandbox.processes.find(selector(req.process));
    if (!proc.spec.stdin || proc.spec.pty)
      throw new ConnectError(`process ${proc.pid} was not started with stdin`, Code.FailedPrecondition);
    proc.exec.closeStdin();
    return {};
  },

  async update(req, ctx) {
    const { sandbox } = await acting(ctx);
    const proc = sandbox.processes.find(selector(req.process));
    if (!proc.spec.pty) throw new ConnectError(`process ${proc.pid} has no pty`, Code.FailedPrecondition);
    const size = req.pty?.size;
    if (!size?.cols || !size.rows) throw new ConnectError('pty.size: cols and rows are required', Code.InvalidArgument);
    await proc.exec.resize(size.cols, size.rows).catch((err: unknown) => {
      throw toConnectError(err);
    });
    return {};
  },
};

async function writeInput(
  proc: GuestProcess,
  input: { case: 'stdin' | 'pty'; value: Uint8Array } | { case: undefined; value?: undefined } | undefined,
): Promise<void> {
  if (!input?.case) throw new ConnectError('input: stdin or pty bytes are required', Code.InvalidArgument);
  if (input.case === 'pty' ? !proc.spec.pty : !proc.spec.stdin || proc.spec.pty)
    throw new ConnectError(
      `process ${proc.pid} takes no ${input.case} input (start it with ${input.case === 'pty' ? 'a pty' : 'stdin: true'})`,
      Code.FailedPrecondition,
    );
  try {
    if (!proc.exec.write(Buffer.from(input.value))) await proc.exec.drained();
  } catch (err) {
    throw toConnectError(err);
  }
}
