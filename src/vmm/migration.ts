/**
 * Outgoing migration into a file without letting QEMU spawn anything (`-sandbox spawn=deny`): QEMU
 * connects to a unix socket we listen on, and we stream what it sends into the file. Incoming state is
 * passed to QEMU as an inherited file descriptor (`fd:3`).
 */
import { createWriteStream, chmodSync, rmSync } from 'node:fs';
import { createServer, type Socket } from 'node:net';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { SandboxError } from '../errors.js';
import type { QmpClient } from './qmp.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** How long the state stream may take to end after QEMU reports the migration completed. */
const STREAM_END_MS = 10_000;

interface MigrateInfo {
  status?: string;
  'error-desc'?: string;
}

/** Poll query-migrate until the migration is completed (or failed) within timeoutMs. */
export async function waitMigration(qmp: QmpClient, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (let delay = 1; ; delay = Math.min(delay * 2, 20)) {
    // As in waitIncoming: a busy QEMU may answer one query late; the caller's deadline is what bounds the wait.
    const info = await qmp.execute<MigrateInfo>('query-migrate', undefined, Math.max(1_000, deadline - Date.now()));
    if (info.status === 'completed') return;
    if (info.status === 'failed' || info.status === 'cancelled') {
      throw new SandboxError('vm.migration-failed', `${what} failed: ${info['error-desc'] ?? info.status}`, {
        hint: 'see qemu.log in the VM run dir',
      });
    }
    if (Date.now() > deadline) {
      await qmp.execute('migrate_cancel').catch(() => undefined);
      throw new SandboxError('vm.migration-timeout', `${what} did not finish within ${timeoutMs} ms`, {
        hint: 'the host may be overloaded; retry',
      });
    }
    await sleep(delay);
  }
}

/** Migrate the VM's state (per the capabilities already set) into `file`. */
export async function migrateToFile(
  qmp: QmpClient,
  file: string,
  sockDir: string,
  opts: { timeoutMs?: number; what?: string } = {},
): Promise<number> {
  const what = opts.what ?? 'snapshot';
  const timeoutMs = opts.timeoutMs ?? 120_000;
  const sockPath = join(sockDir, `mig-${randomBytes(4).toString('hex')}.sock`);
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(sockPath, () => resolve());
  });
  chmodSync(sockPath, 0o666); // QEMU may run as an unprivileged user by then
  let conn: Socket | undefined;
  const written = new Promise<number>((resolve, reject) => {
    server.once('connection', (c) => {
      conn = c;
      const ws = createWriteStream(file);
      let bytes = 0;
      c.on('data', (d: Buffer) => (bytes += d.length));
      c.pipe(ws);
      ws.once('finish', () => resolve(bytes));
      ws.once('error', reject);
      c.on('error', reject);
    });
  });
  written.catch(() => undefined);
  try {
    await qmp.execute('migrate', { uri: `unix:${sockPath}` });
    await waitMigration(qmp, timeoutMs, what);
    // QEMU has sent everything once it says completed: the stream's end is a moment behind, never minutes (a full
    // run once waited the whole timeout here for a stream that never ended; failing fast lets the caller retry).
    const bytes = await Promise.race([
      written,
      sleep(STREAM_END_MS).then(() => {
        throw new SandboxError(
          'vm.migration-timeout',
          `${what}: QEMU reported the migration completed, but the state stream ${conn ? 'did not end' : 'never connected'} within ${STREAM_END_MS} ms`,
          { hint: 'retry; see qemu.log in the VM run dir' },
        );
      }),
    ]);
    return bytes;
  } finally {
    conn?.destroy();
    server.close();
    rmSync(sockPath, { force: true });
  }
}

/** Wait until an incoming migration has been loaded (runstate leaves `inmigrate`). */
export async function waitIncoming(qmp: QmpClient, timeoutMs: number): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  for (let delay = 1; ; delay = Math.min(delay + 1, 10)) {
    // QEMU answers its monitor only between chunks of the load: under TCG on a busy host one query can wait
    // seconds, so each is bounded by what is left of the caller's deadline, not by QMP's default.
    const st = await qmp.execute<{ status: string }>('query-status', undefined, Math.max(1_000, deadline - Date.now()));
    if (st.status !== 'inmigrate') {
      if (st.status === 'running' || st.status === 'paused' || st.status === 'postmigrate') return st.status;
      throw new SandboxError('vm.restore-failed', `VM state load ended in runstate ${st.status}`, {
        hint: 'the snapshot does not match this QEMU/device config; recreate the template',
      });
    }
    if (Date.now() > deadline) {
      throw new SandboxError('vm.restore-timeout', `VM state did not load within ${timeoutMs} ms`, {
        hint: 'the host may be overloaded; retry',
      });
    }
    await sleep(delay);
  }
}
