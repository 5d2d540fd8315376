import { readdir } from 'node:fs/promises';
import { join } from 'node:path';

type Kubectl = (args: string[], input?: string) => Promise<string>;

/** Server-side apply every CRD file in `dir` (named `<group>_<plural>.yaml`) and wait until all are Established. */
export async function applyCrdDir(kubectl: Kubectl, dir: string): Promise<string[]> {
  const files = (await readdir(dir).catch(() => [] as string[])).filter((f) => f.endsWith('.yaml')).sort();
  if (!files.length) return [];
  await kubectl(['apply', '--server-side', '--force-conflicts', ...files.flatMap((f) => ['-f', join(dir, f)])]);
  const names = files.map((f) =>
    f
      .replace(/\.yaml$/, '')
      .split('_')
      .reverse()
      .join('.'),
  );
  await kubectl(['wait', '--for=condition=Established', '--timeout=60s', ...names.map((n) => `crd/${n}`)]);
  return names;
}
