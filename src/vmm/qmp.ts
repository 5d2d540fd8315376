/**
 * A small QMP (QEMU Machine Protocol) client: newline-delimited JSON over a unix socket. Commands carry
 * an `id` so answers are matched even when events interleave. Every command has a deadline.
 */
import { connect as netConnect, type Socket } from 'node:net';
import { SandboxError } from '../errors.js';

export interface QmpEvent {
  event: string;
  data?: Record<string, unknown>;
  timestamp?: { seconds: number; microseconds: number };
}

interface Waiter {
  resolve: (v: unknown) => void;
  reject: (e: Error) => void;
  timer: NodeJS.Timeout;
  cmd: string;
}

const MAX_LINE = 4 << 20;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class QmpClient {
  private buf = '';
  private nextId = 1;
  private readonly waiters = new Map<string, Waiter>();
  private readonly eventListeners = new Set<(e: QmpEvent) => void>();
  private closedErr: SandboxError | undefined;
  private greeting: ((v: unknown) => void) | undefined;

  private constructor(private readonly socket: Socket) {
    socket.setEncoding('utf8');
    socket.on('data', (d: string) => this.onData(d));
    socket.on('error', (err) =>
      this.fail(new SandboxError('qmp.disconnected', `QMP connection error: ${err.message}`, { cause: err })),
    );
    socket.on('close', () => this.fail(new SandboxError('qmp.disconnected', 'QMP connection closed (QEMU exited?)')));
  }

  /** Connect (retrying until the socket exists), read the greeting and negotiate capabilities. */
  static async connect(path: string, opts: { timeoutMs?: number; isAlive?: () => boolean } = {}): Promise<QmpClient> {
    const deadline = Date.now() + (opts.timeoutMs ?? 10_000);
    let lastErr: unknown;
    for (;;) {
      if (opts.isAlive && !opts.isAlive()) {
        throw new SandboxError('vm.process-exited', 'QEMU exited before its QMP socket came up', {
          hint: 'see the VM log (qemu.log in the run dir)',
        });
      }
      try {
        const socket = await new Promise<Socket>((resolve, reject) => {
          const s = netConnect(path);
          s.once('connect', () => {
            s.removeAllListeners('error');
            resolve(s);
          });
          s.once('error', reject);
        });
        const c = new QmpClient(socket);
        await c.handshake(Math.max(100, deadline - Date.now()));
        return c;
      } catch (err) {
        lastErr = err;
        if (Date.now() > deadline) break;
        await sleep(2);
      }
    }
    throw new SandboxError(
      'qmp.unreachable',
      `cannot connect to QMP at ${path}: ${(lastErr as Error | undefined)?.message ?? String(lastErr)}`,
      {
        cause: lastErr,
        hint: 'QEMU is not running or did not start; see qemu.log in the VM run dir',
      },
    );
  }

  private async handshake(timeoutMs: number): Promise<void> {
    await new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new SandboxError('qmp.timeout', 'no QMP greeting')), timeoutMs);
      this.greeting = (v) => {
        clearTimeout(t);
        resolve(v);
      };
      if (this.closedErr) reject(this.closedErr);
    });
    await this.execute('qmp_capabilities', undefined, timeoutMs);
  }

  get closed(): boolean {
    return this.closedErr !== undefined;
  }

  onEvent(fn: (e: QmpEvent) => void): () => void {
    this.eventListeners.add(fn);
    return () => this.eventListeners.delete(fn);
  }

  /** Resolve on the next event named `name` (or reject after timeoutMs). */
  waitEvent(name: string, timeoutMs: number): Promise<QmpEvent> {
    return new Promise((resolve, reject) => {
      const off = this.onEvent((e) => {
        if (e.event === name) {
          clearTimeout(t);
          off();
          resolve(e);
        }
      });
      const t = setTimeout(() => {
        off();
        reject(new SandboxError('qmp.timeout', `no ${name} event within ${timeoutMs} ms`));
      }, timeoutMs);
    });
  }

  execute<T = unknown>(cmd: string, args?: Record<string, unknown>, timeoutMs = 10_000): Promise<T> {
    if (this.closedErr) return Promise.reject(this.closedErr);
    const id = `c${this.nextId++}`;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters.delete(id);
        reject(
          new SandboxError('qmp.timeout', `QMP ${cmd} got no answer within ${timeoutMs} ms`, {
            hint: 'QEMU may be hung; destroy the VM',
          }),
        );
      }, timeoutMs);
      this.waiters.set(id, { resolve: resolve as (v: unknown) => void, reject, timer, cmd });
      this.socket.write(`${JSON.stringify(args ? { execute: cmd, arguments: args, id } : { execute: cmd, id })}\n`);
    });
  }

  close(): void {
    this.fail(new SandboxError('qmp.disconnected', 'QMP connection closed by the host'));
  }

  private fail(err: SandboxError): void {
    if (this.closedErr) return;
    this.closedErr = err;
    this.socket.destroy();
    for (const w of this.waiters.values()) {
      clearTimeout(w.timer);
      w.reject(err);
    }
    this.waiters.clear();
  }

  private onData(d: string): void {
    this.buf += d;
    if (this.buf.length > MAX_LINE) {
      this.fail(new SandboxError('qmp.protocol', 'QMP message too large'));
      return;
    }
    let i: number;
    while ((i = this.buf.indexOf('\n')) >= 0) {
      const line = this.buf.slice(0, i).trim();
      this.buf = this.buf.slice(i + 1);
      if (!line) continue;
      let msg: Record<string, unknown>;
      try {
        msg = JSON.parse(line) as Record<string, unknown>;
      } catch {
        continue;
      }
      if ('QMP' in msg) {
        this.greeting?.(msg);
        continue;
      }
      if (typeof msg.event === 'string') {
        for (const fn of this.eventListeners) fn(msg as unknown as QmpEvent);
        continue;
      }
      const id = typeof msg.id === 'string' ? msg.id : undefined;
      const w = id ? this.waiters.get(id) : undefined;
      if (!w || !id) continue;
      this.waiters.delete(id);
      clearTimeout(w.timer);
      if ('error' in msg) {
        const e = msg.error as { class?: string; desc?: string };
        w.reject(
          new SandboxError(
            'qmp.error',
            `QMP ${w.cmd} failed: ${e.desc ?? 'unknown error'} (${e.class ?? 'GenericError'})`,
          ),
        );
      } else {
        w.resolve(msg.return);
      }
    }
  }
}
