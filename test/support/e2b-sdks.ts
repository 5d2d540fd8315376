/**
 * Published e2b SDKs of several versions, installed from their registries by the test that uses them (npm for JS,
 * PyPI for Python) into caches outside the repo keyed by version (`<cacheDir>/e2b-sdks/{js,py}/<version>`), so a
 * second run installs nothing. The repo's own `e2b` dependency is one version; these are the others the platform
 * must serve (docs/e2b.md "Tests and benchmark" has the table).
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { readClusterEnvironment } from '../../src/cluster/index.js';

const run = promisify(execFile);

function cacheRoot(): string {
  return join(readClusterEnvironment().cacheDir, 'e2b-sdks');
}

/** Install once: into a temporary directory renamed into place, so a killed install leaves nothing half-made. */
async function installOnce(dir: string, install: (tmp: string) => Promise<void>): Promise<void> {
  if (existsSync(join(dir, '.installed'))) return;
  const tmp = `${dir}.tmp-${process.pid}`;
  await rm(tmp, { recursive: true, force: true });
  await mkdir(tmp, { recursive: true });
  await install(tmp);
  await writeFile(join(tmp, '.installed'), '');
  await rm(dir, { recursive: true, force: true });
  await rename(tmp, dir);
}

/** The JS SDK `e2b@<version>` from npm, imported as a module (its own copy, not the repo's). */
export async function jsSdk(version: string): Promise<typeof import('e2b')> {
  const dir = join(cacheRoot(), 'js', version);
  await installOnce(dir, async (tmp) => {
    await writeFile(join(tmp, 'package.json'), JSON.stringify({ name: 'e2b-sdk-cache', private: true }));
    await run('npm', ['install', '--no-audit', '--no-fund', '--ignore-scripts', `e2b@${version}`], {
      cwd: tmp,
      timeout: 300_000,
    });
  });
  // Loaded from the cache, with its own dependencies (not the repo's e2b or undici).
  return (await import(
    pathToFileURL(join(dir, 'node_modules', 'e2b', 'dist', 'index.mjs')).href
  )) as typeof import('e2b');
}

/** A virtualenv with the Python SDK `e2b==<version>` from PyPI; its interpreter's path. */
export async function pySdk(version: string): Promise<string> {
  const dir = join(cacheRoot(), 'py', version);
  const python = join(dir, 'bin', 'python');
  await installOnce(dir, async (tmp) => {
    await run('python3', ['-m', 'venv', tmp], { timeout: 120_000 });
    await run(join(tmp, 'bin', 'pip'), ['install', '--quiet', '--disable-pip-version-check', `e2b==${version}`], {
      timeout: 600_000,
    });
  });
  // The venv's scripts name their interpreter by the temporary path; `python -m` and the interpreter itself do not.
  return python;
}

/** Run a Python script with the venv's interpreter; its stdout parsed as JSON. */
export async function runPython(python: string, script: string, env: Record<string, string>): Promise<unknown> {
  try {
    const { stdout } = await run(python, ['-c', script], {
      env: { ...process.env, ...env },
      timeout: 600_000,
      maxBuffer: 16 << 20,
    });
    return JSON.parse(stdout.trim().split('\n').at(-1) ?? '');
  } catch (err) {
    const e = err as Error & { stderr?: string; stdout?: string };
    throw new Error(`python ${python}: ${e.message}\nstdout: ${e.stdout ?? ''}\nstderr: ${e.stderr ?? ''}`);
  }
}
