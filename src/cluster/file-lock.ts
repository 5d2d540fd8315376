import { mkdir, open, readFile, rm } from 'node:fs/promises';
import { dirname } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * A cross-process lock file holding the owner's PID. A lock whose owner is gone is stale and taken over,
 * so a build killed halfway never blocks the next one.
 */
export async function withFileLock<T>(
  path: string,
  progress: ((l: string) => void) | undefined,
  fn: () => Promise<T>,
): Promise<T> {
  await mkdir(dirname(path), { recursive: true });
  let announced = false;
  for (;;) {
    try {
      const fh = await open(path, 'wx');
      await fh.writeFile(String(process.pid));
      await fh.close();
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const owner = Number.parseInt(await readFile(path, 'utf8').catch(() => ''), 10);
      if (!Number.isFinite(owner) || !isAlive(owner)) {
        await rm(path, { force: true });
        continue;
      }
      if (!announced) progress?.(`waiting for process ${owner} that holds ${path}`);
      announced = true;
      await sleep(1000);
    }
  }
  try {
    return await fn();
  } finally {
    await rm(path, { force: true });
  }
}

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
