/**
 * examples/lifecycle/walkthrough.sh runs as a user would run it (real kubectl and the kubectl-sandbox plugin on
 * PATH) and every step reports a latency and the file survives pause/resume and the snapshot.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { aggregatedNamespace, getAggregated, TEST_TEMPLATE, type AggregatedEnv } from '../support/aggregated.js';

const run = promisify(execFile);
const SCRIPT = fileURLToPath(new URL('../../examples/lifecycle/walkthrough.sh', import.meta.url));

describe('examples/lifecycle/walkthrough.sh', () => {
  let env: AggregatedEnv;
  let ns: { name: string; cleanup(): Promise<void> };
  before(async () => {
    env = await getAggregated();
    ns = await aggregatedNamespace('walk');
  });
  after(async () => ns?.cleanup());

  it('runs every step and prints its latency', async () => {
    const { stdout } = await run('bash', [SCRIPT, ns.name, TEST_TEMPLATE], {
      env: {
        ...process.env,
        KUBECONFIG: env.cluster.kubeconfigPath,
        PATH: `${dirname(env.cluster.binaries.kubectl!)}:${env.pluginDir}:${process.env.PATH}`,
      },
      timeout: 300_000,
    });
    const lines = stdout.trim().split('\n');
    for (const step of ['create sandbox', 'snapshot', 'fork 2', 'pause', 'resume', 'create from snapshot', 'delete'])
      assert.ok(
        lines.some((l) => l.startsWith(step) && /\s\d+ ms\s/.test(l)),
        `step "${step}" in:\n${stdout}`,
      );
    assert.ok(lines.find((l) => l.startsWith('read the file after resume'))?.includes('hello-from-parent'), stdout);
    assert.ok(
      lines.find((l) => l.startsWith('read the file in the restored one'))?.includes('hello-from-parent'),
      stdout,
    );
  });
});
