/**
 * The export line of `sbx up --detach` (what `eval "$(sbx up --detach --layout aggregated)"` sets): kubectl's
 * KUBECONFIG and PATH, and the e2b SDK's three variables with the key from the platform's key file.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { exportLine } from '../../src/cli/commands/platform.js';

describe('sbx up --detach export line', () => {
  const dirs: string[] = [];
  after(() => Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true }))));

  it('sets the e2b SDK variables from the aggregated platform, the key from its file', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'export-line-'));
    dirs.push(dir);
    const apiKeyFile = join(dir, 'e2b-api-keys');
    await writeFile(apiKeyFile, '# e2b API keys of the local platform (sbx up)\ne2b_0123abcd\n', { mode: 0o600 });
    const line = await exportLine({
      status: 'ready',
      supervisorPid: 1,
      kubeconfigPath: join(dir, 'kubeconfig'),
      binDir: join(dir, 'bin'),
      pluginDir: join(dir, 'plugins'),
      e2b: { apiUrl: 'http://10.0.0.1:3000', sandboxUrl: 'http://10.0.0.1:3001', apiKeyFile },
    });
    assert.equal(
      line,
      `export KUBECONFIG=${dir}/kubeconfig PATH=${dir}/bin:${dir}/plugins:$PATH` +
        ' E2B_API_URL=http://10.0.0.1:3000 E2B_SANDBOX_URL=http://10.0.0.1:3001 E2B_API_KEY=e2b_0123abcd',
    );
  });

  it('has no e2b variables without the e2b API (the standalone layout)', async () => {
    const line = await exportLine({ status: 'ready', supervisorPid: 1, kubeconfigPath: '/k', binDir: '/b' });
    assert.equal(line, 'export KUBECONFIG=/k PATH=/b:$PATH');
  });
});
