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
  // kubectl wait fails at once ("accessor error: <nil>") on a CRD whose status has no conditions yet, as a loaded
  // apiserver can leave it just after the apply: asked again until the deadline.
  const deadline = Date.now() + 60_000;
  for (;;) {
    try {
      await kubectl(['wait', '--for=condition=Established', '--timeout=60s', ...names.map((n) => `crd/${n}`)]);
      return names;
    } catch (err) {
      if (!/accessor error/.test(String(err)) || Date.now() > deadline) throw err;
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}
