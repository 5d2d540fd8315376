import { fileURLToPath } from 'node:url';
import { applyCrdDir } from '../../src/cluster/index.js';

export const CRD_DIR = fileURLToPath(new URL('../../deploy/crds/', import.meta.url));

/** Apply the generated CRDs and wait until every one is Established. */
export async function installCrds(kubectl: (args: string[], input?: string) => Promise<string>): Promise<void> {
  await applyCrdDir(kubectl, CRD_DIR);
}
