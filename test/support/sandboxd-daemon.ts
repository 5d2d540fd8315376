/**
 * sandboxd as its own process (bin/sandboxd.mjs), for tests that restart or kill it: one data dir and root token
 * kept across restarts, a port the daemon picks (it prints the address it bound), stderr kept for failure messages.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { defaultRunRoot } from '../../src/sandboxd/engine.js';
import { killRecorded, readRecords } from '../../src/vmm/run-records.js';

const BIN = fileURLToPath(new URL('../../bin/sandboxd.mjs', import.meta.url));
/** How long an ordinary stop may take before remove() kills the daemon. */
const STOP_GRACE_MS = 30_000;

/** Daemons of this test process still running: killed if the process exits with them up (a failed or cut run). */
const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});

/** One API call: status and JSON body (`{ raw }` when the body is not JSON). `token` null sends no header. */
export async function call(
  base: string,
  method: string,
  path: string,
  body: unknown,
  token: string | null,
): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), 'content-type': 'application/json' },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json: Record<string, unknown> = {};
  try {
    json = text ? (JSON.parse(text) as Record<string, unknown>) : {};
  } catch {
    json = { raw: text };
  }
  return { status: res.status, json };
}

export class SandboxdProcess {
  /** `http://host:port` of the running daemon (it changes across restarts). */
  base = '';
  readonly logs: string[] = [];
  private child: ChildProcess | undefined;

  private constructor(
    readonly dir: string,
    private readonly args: string[],
  ) {}

  /**
   * A daemon named `nodeName` with root token `rootToken` and `tenants` (name -> token); not started yet. `port`
   * keeps its address across restarts (peers that know it find it again); default: one the daemon picks each start.
   */
  static async create(
    nodeName: string,
    rootToken: string,
    tenants: Record<string, string> = {},
    opts: { port?: number } = {},
  ): Promise<SandboxdProcess> {
    const dir = await mkdtemp(join(tmpdir(), `sbxd-${nodeName}-`));
    await writeFile(join(dir, 'token'), rootToken);
    const listen = `127.0.0.1:${opts.port ?? 0}`;
    const args = ['--node-name', nodeName, '--listen', listen, '--data-dir', join(dir, 'data')];
    args.push('--token-file', join(dir, 'token'), '--log-level', 'warn');
    if (Object.keys(tenants).length) {
      const lines = Object.entries(tenants).map(([name, token]) => `${name} ${token}\n`);
      await writeFile(join(dir, 'tenants'), lines.join(''));
      args.push('--tenant-tokens-file', join(dir, 'tenants'));
    }
    return new SandboxdProcess(dir, args);
  }

  get dataDir(): string {
    return join(this.dir, 'data');
  }

  /** Start the daemon; resolves once its API listens. */
  async start(extra: string[] = []): Promise<void> {
    const child = spawn(process.execPath, [BIN, ...this.args, ...extra], { stdio: ['ignore', 'pipe', 'pipe'] });
    this.child = child;
    live.add(child);
    child.once('exit', () => live.delete(child));
    child.stderr.on('data', (d: Buffer) => this.logs.push(d.toString()));
    this.base = await new Promise<string>((resolve, reject) => {
      let out = '';
      child.stdout.on('data', (d: Buffer) => {
        out += d.toString();
        const m = /sandboxd listening on (\S+)/.exec(out);
        if (m) resolve(`http://${m[1]}`);
      });
      child.once('exit', (code) =>
        reject(new Error(`sandboxd exited (${code}) before listening:\n${this.logs.join('')}`)),
      );
    });
  }

  /** Crash it: SIGKILL, as a power cut or OOM kill would. */
  kill(): Promise<void> {
    return this.signal('SIGKILL');
  }

  /** Stop it the ordinary way (SIGTERM); nothing when it is not running. */
  stop(): Promise<void> {
    return this.signal('SIGTERM');
  }

  /** Send `sig` and wait for the exit; after `graceMs`, SIGKILL (a daemon stopped by SIGSTOP is continued first). */
  private async signal(sig: NodeJS.Signals, graceMs?: number): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((r) => child.once('exit', r));
    child.kill(sig);
    if (graceMs === undefined) return void (await exited);
    const timer = setTimeout(() => {
      child.kill('SIGCONT');
      child.kill('SIGKILL');
    }, graceMs);
    try {
      await exited;
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Stop it (SIGKILL if it does not exit in time), kill every VM it or an earlier run of it left (the daemons run
   * without --destroy-on-exit, so their VMs outlive them, as they would a restart), and remove its directories.
   */
  async remove(): Promise<void> {
    await this.signal('SIGTERM', STOP_GRACE_MS);
    const runRoot = defaultRunRoot(this.dataDir);
    for (const rec of readRecords(runRoot)) await killRecorded(rec, runRoot);
    await rm(runRoot, { recursive: true, force: true });
    await rm(this.dir, { recursive: true, force: true });
  }
}
