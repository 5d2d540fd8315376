/**
 * The platform's own processes (sandbox-operator, sandbox-apiserver, sandboxd): started from this package's bin/
 * scripts with their output in one log file each, waited for by their health endpoint (failing fast with the log
 * tail if one exits), and stopped in reverse order, SIGTERM first.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { SandboxError } from '../errors.js';

const REPO = fileURLToPath(new URL('../../', import.meta.url));
export const binScript = (name: string) => join(REPO, 'bin', `${name}.mjs`);

/**
 * `SBX_PROFILE=<regexp>:<dir>` (benches): the components whose name matches run under Node's CPU profiler, each
 * writing a .cpuprofile into <dir> when it exits (its SIGTERM at stop included), e.g.
 * `SBX_PROFILE='^sandbox-apiserver$:/tmp/prof'`. Only what matches pays the profiler's cost.
 */
function profileFlags(name: string): string[] {
  const spec = process.env.SBX_PROFILE;
  if (!spec) return [];
  const i = spec.lastIndexOf(':');
  if (i <= 0) throw new SandboxError('platform.bad-profile-spec', `SBX_PROFILE="${spec}" is not <regexp>:<dir>`);
  return new RegExp(spec.slice(0, i)).test(name) ? ['--cpu-prof', `--cpu-prof-dir=${spec.slice(i + 1)}`] : [];
}

export interface Component {
  name: string;
  child: ChildProcess;
  logPath: string;
}

export class Components {
  readonly list: Component[] = [];

  constructor(private readonly logDir: string) {}

  launch(name: string, script: string, args: string[]): Component {
    const logPath = join(this.logDir, `${name}.log`);
    const log = createWriteStream(logPath);
    const child = spawn(process.execPath, [...profileFlags(name), binScript(script), ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child.stdout?.pipe(log);
    child.stderr?.pipe(log);
    const c = { name, child, logPath };
    this.list.push(c);
    return c;
  }

  pids(): number[] {
    return this.list.map((c) => c.child.pid ?? -1);
  }

  async stop(): Promise<void> {
    for (const { child } of [...this.list].reverse()) {
      if (child.exitCode !== null || child.signalCode !== null) continue;
      child.kill('SIGTERM');
      const exited = await Promise.race([
        new Promise((r) => child.once('exit', r)).then(() => true),
        sleep(20_000).then(() => false),
      ]);
      if (!exited) child.kill('SIGKILL');
    }
  }

  /** Throws, with the last lines of its log, if `c` has exited. */
  async assertRunning(c: Component): Promise<void> {
    if (c.child.exitCode === null && c.child.signalCode === null) return;
    const tail = (await readFile(c.logPath, 'utf8').catch(() => '')).trimEnd().split('\n').slice(-10).join('\n');
    throw new SandboxError(
      'platform.component-died',
      `${c.name} exited (${c.child.exitCode ?? c.child.signalCode}). Last log lines:\n${tail}`,
      {
        hint: `see ${c.logPath}`,
      },
    );
  }

  /** Poll until `path` exists (a file the component writes when it starts). */
  async waitFile(c: Component, path: string, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      await this.assertRunning(c);
      if (
        await readFile(path).then(
          () => true,
          () => false,
        )
      )
        return;
      await sleep(100);
    }
    throw new SandboxError('platform.not-ready', `${c.name} did not write ${path} within ${timeoutMs} ms`, {
      hint: `see ${c.logPath}`,
    });
  }

  /** Poll `url` until it answers 200; `ca` for an HTTPS endpoint with its own CA. */
  async waitReady(c: Component, url: string, timeoutMs: number, ca?: string): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      await this.assertRunning(c);
      const ok = await new Promise<boolean>((resolve) => {
        const req = (url.startsWith('https:') ? httpsRequest : httpRequest)(url, { timeout: 1000, ca }, (res) => {
          res.resume();
          resolve(res.statusCode === 200);
        });
        req.on('error', () => resolve(false));
        req.on('timeout', () => req.destroy());
        req.end();
      });
      if (ok) return;
      await sleep(200);
    }
    throw new SandboxError('platform.not-ready', `${c.name} not ready after ${timeoutMs} ms`, {
      hint: `see ${c.logPath}`,
    });
  }
}
