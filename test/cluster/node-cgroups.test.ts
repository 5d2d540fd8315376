import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import {
  cgroupsWithPrefix,
  createNodeCgroups,
  destroyNodeCgroups,
  inAgentsCgroup,
  processesInSubtree,
  removeRealNodeCgroups,
} from '../../src/cluster/nodes/cgroups.js';
import { eventually } from '../support/eventually.js';

/**
 * A real node's cgroup subtree holds everything it runs, including what its agents start later and what escapes
 * their process tree (containerd's shims daemonize): stopping the node kills the subtree and removes it. Real
 * cgroups of this machine, under a name no cluster uses.
 */
describe('real-node cgroups', () => {
  const alive = (pid: number) => existsSync(`/proc/${pid}`) && !/^State:\s+Z/m.test(readStatus(pid));

  it('an agent started through the prefix, and what it forks and orphans, are in the subtree; destroy kills them and removes it', async () => {
    const root = `sbxtest-${randomBytes(4).toString('hex')}-worker-0`;
    await createNodeCgroups(root);
    try {
      // The agent double-forks a sleeper (as a shim does) and exits itself after printing its pid.
      const prefix = await inAgentsCgroup(root);
      // The sleeper's stdio goes nowhere, so the agent's pipe closes when the agent exits.
      const agent = spawn(
        prefix[0]!,
        [...prefix.slice(1), 'sh', '-c', '(setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!)'],
        { stdio: ['ignore', 'pipe', 'inherit'] },
      );
      let out = '';
      agent.stdout.on('data', (d: Buffer) => (out += d.toString()));
      await new Promise((r) => agent.on('close', r));
      const orphan = Number(out.trim());
      assert.ok(orphan > 0, `the agent printed its child's pid (got ${JSON.stringify(out)})`);
      assert.ok(alive(orphan), 'the orphaned sleeper runs');
      assert.ok((await processesInSubtree(root)).includes(orphan), 'the orphan is still in the node subtree');
      assert.match(readFileSync(`/proc/${orphan}/cgroup`, 'utf8'), new RegExp(`/${root}/agents`));

      assert.deepEqual(await destroyNodeCgroups(root), [], 'every directory removed');
      await eventually(() => assert.ok(!alive(orphan), 'the orphan is killed'), { timeoutMs: 10_000 });
      assert.deepEqual(await cgroupsWithPrefix(root), [], 'no hierarchy keeps the subtree');
    } finally {
      await destroyNodeCgroups(root);
    }
  });

  it("removeRealNodeCgroups removes every node subtree of one cluster namespace, and only that namespace's", async () => {
    const ns = `sbxtest-${randomBytes(4).toString('hex')}`;
    const other = `${ns}0`; // a namespace whose name merely starts with the same characters
    const mine = [`${ns}-worker-0`, `${ns}-worker-1`];
    for (const r of [...mine, `${other}-worker-0`]) await createNodeCgroups(r);
    try {
      assert.deepEqual(await removeRealNodeCgroups(ns), []);
      assert.deepEqual(await cgroupsWithPrefix(`${ns}-`), []);
      assert.deepEqual(await cgroupsWithPrefix(`${other}-`), [`${other}-worker-0`]);
    } finally {
      for (const r of [...mine, `${other}-worker-0`]) await destroyNodeCgroups(r);
    }
  });
});

function readStatus(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/status`, 'utf8');
  } catch {
    return 'State: Z';
  }
}
