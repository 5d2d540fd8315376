import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const CRD_DIR = fileURLToPath(new URL('../../deploy/crds/', import.meta.url));

/** Apply the generated CRDs and wait until every one is Established. */
export async function installCrds(kubectl: (args: string[], input?: string) => Promise<string>): Promise<void> {
  const files = (await readdir(CRD_DIR).catch(() => [] as string[])).filter((f) => f.endsWith('.yaml'));
  if (!files.length) return;
  await kubectl(['apply', '--server-side', '--force-conflicts', ...files.flatMap((f) => ['-f', join(CRD_DIR, f)])]);
  await kubectl([
    'wait',
    '--for=condition=Established',
    '--timeout=60s',
    ...files.map(
      (f) =>
        `crd/${f
          .replace(/\.yaml$/, '')
          .split('_')
          .reverse()
          .join('.')}`,
    ),
  ]);
}
