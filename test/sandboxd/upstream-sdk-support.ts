/**
 * What the upstream-SDK tests share: upstream agent-sandbox's Python SDK (`k8s-agent-sandbox[grpc]`) from PyPI, in a
 * venv cached outside the repository by version (docs/runtime-adapter.md "How upstream's SDKs reach a microVM").
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, rename, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { readClusterEnvironment } from '../../src/cluster/index.js';

export const run = promisify(execFile);
export const SDK_VERSION = '1.0.8';

/** A venv with `k8s-agent-sandbox[grpc]==<version>` from PyPI, cached outside the repo by version; its python. */
export async function upstreamPySdk(version: string = SDK_VERSION): Promise<string> {
  const dir = join(readClusterEnvironment().cacheDir, 'py', `k8s-agent-sandbox-${version}-grpc`);
  if (!existsSync(join(dir, '.installed'))) {
    // Into a temporary directory renamed into place, so a killed install leaves nothing half-made.
    const tmp = `${dir}.tmp-${process.pid}`;
    await rm(tmp, { recursive: true, force: true });
    await mkdir(dirname(tmp), { recursive: true });
    await run('python3', ['-m', 'venv', tmp], { timeout: 120_000 });
    await run(
      join(tmp, 'bin', 'pip'),
      ['install', '--quiet', '--disable-pip-version-check', `k8s-agent-sandbox[grpc]==${version}`],
      { timeout: 600_000 },
    );
    await writeFile(join(tmp, '.installed'), '');
    await rm(dir, { recursive: true, force: true });
    await rename(tmp, dir);
  }
  return join(dir, 'bin', 'python');
}

/** Runs an SDK program; its last stdout line parsed as JSON, and the whole output for assertion messages. */
export async function runSdk(
  file: string,
  args: string[],
  env: NodeJS.ProcessEnv,
): Promise<{ out: Record<string, unknown>; msg: string }> {
  const { stdout, stderr } = await run(file, args, { env, timeout: 10 * 60_000, maxBuffer: 16 << 20 }).catch(
    (err: Error & { stdout?: string; stderr?: string }) => {
      throw new Error(`${err.message}\nstdout: ${err.stdout ?? ''}\nstderr: ${err.stderr ?? ''}`);
    },
  );
  return {
    out: JSON.parse(stdout.trim().split('\n').at(-1) ?? '') as Record<string, unknown>,
    msg: `${file} said: ${stdout}\n${stderr}`,
  };
}
