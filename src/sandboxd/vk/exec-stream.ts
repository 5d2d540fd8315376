/**
 * `kubectl exec` over WebSockets, the remotecommand channel protocol (k8s.io/cri-streaming remotecommand,
 * client-go tools/remotecommand/websocket.go). Every binary message is one channel byte + data:
 * 0 stdin, 1 stdout, 2 stderr, 3 error/status, 4 resize (JSON `{"Width","Height"}`), and in v5 255 = close
 * (data: the channel being half-closed; the client sends `[255, 0]` at stdin EOF). From v4 the status channel
 * carries a metav1.Status JSON: `Success`, or `Failure` with reason `NonZeroExitCode` and a cause
 * `{reason: "ExitCode", message: "<code>"}`. The server then closes the WebSocket normally (1000), which the
 * client reads as EOF on every stream.
 *
 * Backpressure runs end to end: output is acknowledged to the guest only once the WebSocket has written it to the
 * client's connection, and while stdin waits for the guest process to read it the WebSocket is not read either.
 */
import type { WebSocket } from 'ws';
import type { Logger } from '../../log/logger.js';
import type { ExecProcess, ExecOptions } from '../../guest/index.js';

export const EXEC_PROTOCOLS = ['v5.channel.k8s.io', 'v4.channel.k8s.io', 'channel.k8s.io'] as const;

export const Channel = { stdin: 0, stdout: 1, stderr: 2, error: 3, resize: 4, close: 255 } as const;

export interface ExecRequest {
  command: string[];
  stdin: boolean;
  stdout: boolean;
  stderr: boolean;
  tty: boolean;
}

/** Parse the kubelet's exec/attach query (`command`, `input`, `output`, `error`, `tty`; values "1"/"true"). */
export function parseExecQuery(q: URLSearchParams): ExecRequest | { error: string } {
  const flag = (k: string) => q.get(k) === '1' || q.get(k) === 'true';
  const tty = flag('tty');
  const req: ExecRequest = {
    command: q.getAll('command'),
    stdin: flag('input'),
    stdout: flag('output'),
    // A tty merges stderr into stdout (the kubelet drops stderr with tty too).
    stderr: flag('error') && !tty,
    tty,
  };
  if (!req.stdin && !req.stdout && !req.stderr)
    return { error: 'you must specify at least 1 of stdin, stdout, stderr' };
  if (!req.command.length) return { error: 'you must specify a command' };
  return req;
}

export interface StreamStatus {
  status: 'Success' | 'Failure';
  message?: string;
  reason?: string;
  code?: number;
  details?: { causes: Array<{ reason: string; message: string }> };
}

export function exitStatus(exitCode: number): StreamStatus {
  if (exitCode === 0) return { status: 'Success' };
  return {
    status: 'Failure',
    reason: 'NonZeroExitCode',
    message: `command terminated with non-zero exit code: exit status ${exitCode}`,
    details: { causes: [{ reason: 'ExitCode', message: String(exitCode) }] },
  };
}

export function internalErrorStatus(message: string): StreamStatus {
  return { status: 'Failure', reason: 'InternalError', code: 500, message: `Internal error occurred: ${message}` };
}

export interface ExecTarget {
  exec(argv: readonly string[], opts: ExecOptions): ExecProcess;
}

/**
 * Run `req.command` in the VM and bridge it to an upgraded WebSocket until it exits or the client goes away. What
 * the session reads and prints goes to the client only: not to the pod's log (as on a kubelet, where `kubectl logs`
 * is the container's own output), nor to the node's log.
 */
export function serveExec(ws: WebSocket, target: ExecTarget, req: ExecRequest, log: Logger): void {
  const protocol = ws.protocol;
  const v4 = protocol.startsWith('v4.') || protocol.startsWith('v5.');
  /** Resolves once the message has been written to the client's connection (or the WebSocket is gone). */
  const send = (channel: number, data: Buffer | string): Promise<void> | undefined => {
    if (ws.readyState !== ws.OPEN) return undefined;
    const payload = typeof data === 'string' ? Buffer.from(data) : data;
    return new Promise((resolve) =>
      ws.send(Buffer.concat([Buffer.of(channel), payload]), { binary: true }, () => resolve()),
    );
  };
  const finish = (status: StreamStatus) => {
    if (v4) send(Channel.error, JSON.stringify(status));
    else if (status.status !== 'Success') send(Channel.error, status.message ?? 'error');
    if (ws.readyState === ws.OPEN) ws.close(1000);
  };

  let proc: ExecProcess;
  try {
    proc = target.exec(req.command, {
      stdin: req.stdin,
      ...(req.tty ? { pty: { cols: 80, rows: 24 } } : {}),
      collect: false,
      onStdout: (b) => (req.stdout || req.tty ? send(Channel.stdout, b) : undefined),
      onStderr: (b) => (req.stderr ? send(Channel.stderr, b) : undefined),
    });
  } catch (err) {
    log.info({ err }, 'exec failed to start');
    finish(internalErrorStatus(`error executing command in container: ${(err as Error).message}`));
    return;
  }
  let exited = false;
  proc.wait().then(
    (res) => {
      exited = true;
      log.info({ exitCode: res.exitCode }, 'exec session ended');
      finish(exitStatus(res.exitCode));
    },
    (err: unknown) => {
      exited = true;
      log.info({ err }, 'exec session failed');
      finish(internalErrorStatus(`error executing command in container: ${(err as Error).message}`));
    },
  );

  let started = false;
  const pending: Array<() => void> = [];
  proc.pid.then(
    () => {
      started = true;
      for (const fn of pending.splice(0)) fn();
    },
    () => undefined,
  );
  const whenStarted = (fn: () => void) => (started ? fn() : pending.push(fn));

  ws.on('message', (raw: Buffer, isBinary: boolean) => {
    if (!isBinary || raw.length < 1) return;
    const channel = raw[0];
    const data = raw.subarray(1);
    try {
      if (channel === Channel.stdin && req.stdin) {
        if (data.length && !proc.write(Buffer.from(data))) {
          ws.pause();
          void proc.drained().then(() => ws.resume());
        }
      } else if (channel === Channel.resize && req.tty) {
        const size = JSON.parse(data.toString('utf8')) as { Width?: number; Height?: number };
        const cols = Number(size.Width);
        const rows = Number(size.Height);
        if (cols > 0 && rows > 0) whenStarted(() => void proc.resize(cols, rows).catch(() => undefined));
      } else if (channel === Channel.close && data[0] === Channel.stdin && req.stdin) {
        proc.closeStdin();
      }
    } catch (err) {
      log.debug({ err }, 'bad exec stream message');
    }
  });
  ws.on('close', () => {
    if (!exited) whenStarted(() => void proc.kill('SIGKILL').catch(() => undefined));
  });
  ws.on('error', (err) => log.debug({ err }, 'exec websocket error'));
}
