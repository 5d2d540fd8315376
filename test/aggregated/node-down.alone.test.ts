/**
 * A node that goes down is left out of lists with a Warning header instead of failing them, and is back once it
 * answers. It stops a node of the shared aggregated platform (SIGSTOP), so it runs alone (test/run.ts): any other
 * file's request to that node would wait for it.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import {
  aggregatedNamespace,
  createSandbox,
  getAggregated,
  sandboxManifest,
  type AggregatedEnv,
} from '../support/aggregated.js';
import { eventually } from '../support/eventually.js';

const run = promisify(execFile);

describe('aggregated layout: a node that is down', () => {
  let env: AggregatedEnv;
  before(async () => {
    env = await getAggregated();
  });

  it('a node that is down is left out of lists, and the list says so in a Warning header', async () => {
    const ns = await aggregatedNamespace('down');
    try {
      await createSandbox(env, ns.name, sandboxManifest('n0'));
      const obj = JSON.parse(await env.kubectl(['get', 'sandbox', '-n', ns.name, 'n0', '-o', 'json']));
      const node = env.sandboxd.find((n) => n.node === obj.status.nodeName)!;
      // Stop the node's daemon (SIGSTOP: its feed goes silent, as a partition would) and resume it afterwards.
      const pid = Number((await run('pgrep', ['-f', '--', `--listen=${node.address} `])).stdout.trim().split('\n')[0]);
      assert.ok(pid > 0);
      process.kill(pid, 'SIGSTOP');
      try {
        await eventually(
          async () =>
            run(env.cluster.binaries.kubectl!, [
              `--kubeconfig=${env.cluster.kubeconfigPath}`,
              'get',
              'sandboxes',
              '-n',
              ns.name,
              '-o',
              'name',
            ]),
          {
            until: (r) => !r.stdout.includes('n0') && /unreachable nodes/.test(r.stderr),
            timeoutMs: 40_000,
            intervalMs: 1000,
            what: 'n0 left out with a warning',
          },
        );
      } finally {
        process.kill(pid, 'SIGCONT');
      }
      await eventually(async () => env.kubectl(['get', 'sandboxes', '-n', ns.name, '-o', 'name']), {
        until: (o) => o.includes('n0'),
        timeoutMs: 30_000,
        what: 'n0 back once the node answers',
      });
    } finally {
      await ns.cleanup();
    }
  });
});
