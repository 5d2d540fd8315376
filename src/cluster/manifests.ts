import { readdir } from 'node:fs/promises';
import { join } from 'node:path';

type Kubectl = (args: string[], input?: string) => Promise<string>;

/**
 * Server-side apply every CRD file in `dir` (named `<group>_<plural>.yaml`) and wait until all are Established.
 * `skip` names CRDs (`<plural>.<group>`) to leave out: the aggregated layout serves sandboxes without a CRD.
 */
export async function applyCrdDir(kubectl: Kubectl, dir: string, skip: readonly string[] = []): Promise<string[]> {
  const crdName = (f: string) =>
    f
      .replace(/\.yaml$/, '')
      .split('_')
      .reverse()
      .join('.');
  const files = (await readdir(dir).catch(() => [] as string[]))
    .filter((f) => f.endsWith('.yaml') && !skip.includes(crdName(f)))
    .sort();
  if (!files.length) return [];
  await kubectl(['apply', '--server-side', '--force-conflicts', ...files.flatMap((f) => ['-f', join(dir, f)])]);
  const names = files.map(crdName);
  await kubectl(['wait', '--for=condition=Established', '--timeout=60s', ...names.map((n) => `crd/${n}`)]);
  return names;
}
