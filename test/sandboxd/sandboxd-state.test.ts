/**
 * What sandboxd keeps across a restart and under concurrency (real daemon processes, real microVMs): checkpoints
 * outlive a crash and nothing on disk outlives its record; --max-claims counts claims whose clone is still running.
 */
import assert from 'node:assert/strict';
import { mkdir, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { resolveDriverOptions } from '../../src/vmm/index.js';
import { eventually } from '../support/eventually.js';
import { call, SandboxdProcess } from '../support/sandboxd-daemon.js';

const ROOT = 'root-token-for-state-tests';

describe('sandboxd state across a restart', () => {
  it('checkpoints survive kill -9 (both listed and claimable, with their files); directories no record accounts for are removed', async () => {
    const d = await SandboxdProcess.create('ck-node', ROOT);
    const api = (method: string, path: string, body?: unknown) => call(d.base, method, path, body, ROOT);
    try {
      await d.start(['--pools', 'sandbox/minimal=1']);
      await eventually(async () => (await api('GET', '/v1/info')).json, {
        timeoutMs: 120_000,
        until: (j) => (j.pools as Array<{ warm: number }>)?.[0]?.warm === 1,
        what: 'a warm VM',
      });
      const claim = await api('POST', '/v1/claim', { template: 'sandbox/minimal', ttl_seconds: 600 });
      assert.equal(claim.status, 200, JSON.stringify(claim.json));
      const sandbox = claim.json.id as string;
      const checkpoints: Array<{ id: string; marker: string }> = [];
      for (const marker of ['first', 'second']) {
        const w = await api('POST', `/v1/sandboxes/${sandbox}/exec`, { argv: ['sh', '-c', `echo ${marker} > /m`] });
        assert.equal(w.status, 200, JSON.stringify(w.json));
        const ck = await api('POST', `/v1/sandboxes/${sandbox}/checkpoint`, { name: marker });
        assert.equal(ck.status, 200, `${JSON.stringify(ck.json)}\n${d.logs.join('')}`);
        checkpoints.push({ id: (ck.json.checkpoint as { id: string }).id, marker });
      }
      // A directory of a checkpoint whose record is gone (as a crash between the two would leave it).
      const orphan = join(d.dataDir, 'checkpoints', 'ck_00000000deadbeef');
      await mkdir(orphan, { recursive: true });
      await writeFile(join(orphan, 'mem'), 'x');

      // No wait: a checkpoint the API has answered for is on disk.
      await d.kill();
      await d.start(['--destroy-on-exit']);

      const listed = await api('GET', '/v1/checkpoints');
      assert.equal(listed.status, 200);
      assert.deepEqual(
        (listed.json.checkpoints as Array<{ id: string; name: string; sandbox_id: string }>)
          .map((c) => [c.id, c.name, c.sandbox_id])
          .sort(),
        checkpoints.map((c) => [c.id, c.marker, sandbox]).sort(),
        `${JSON.stringify(listed.json)}\n${d.logs.join('')}`,
      );
      assert.deepEqual(
        (await readdir(join(d.dataDir, 'checkpoints'))).sort(),
        checkpoints.map((c) => c.id).sort(),
        'the orphaned checkpoint directory was removed at start, the recorded ones kept',
      );
      for (const { id, marker } of checkpoints) {
        const c = await api('POST', `/v1/checkpoints/${id}/claim`, { ttl_seconds: 60 });
        assert.equal(c.status, 200, `${JSON.stringify(c.json)}\n${d.logs.join('')}`);
        assert.equal(c.json.from_checkpoint, id);
        const read = await api('POST', `/v1/sandboxes/${c.json.id as string}/exec`, { argv: ['cat', '/m'] });
        assert.equal(read.json.stdout, `${marker}\n`, `the clone of ${id} has the files it was taken with`);
      }
      for (const { id } of checkpoints) assert.equal((await api('DELETE', `/v1/checkpoints/${id}`)).status, 204);
      assert.deepEqual(await readdir(join(d.dataDir, 'checkpoints')), [], 'deleting a checkpoint removes its files');
      const cache = await readdir(resolveDriverOptions().templateRoot);
      assert.deepEqual(
        cache.filter((n) => n.includes(sandbox)),
        [],
        'nothing of these checkpoints is left in the shared template cache',
      );
    } finally {
      await d.remove();
    }
  });
});

describe('sandboxd capacity under concurrent misses', () => {
  it('--max-claims 5 with 20 claims at once and no warm VM: exactly 5 succeed, 15 get 429', async () => {
    const d = await SandboxdProcess.create('cap-node', ROOT);
    const api = (method: string, path: string, body?: unknown) => call(d.base, method, path, body, ROOT);
    try {
      await d.start(['--max-claims', '5', '--destroy-on-exit']);
      const answers = await Promise.all(
        Array.from({ length: 20 }, () => api('POST', '/v1/claim', { template: 'sandbox/minimal', ttl_seconds: 60 })),
      );
      const byStatus = new Map<number, number>();
      for (const a of answers) byStatus.set(a.status, (byStatus.get(a.status) ?? 0) + 1);
      assert.deepEqual(
        Object.fromEntries([...byStatus].sort()),
        { 200: 5, 429: 15 },
        JSON.stringify(answers.filter((a) => a.status !== 200 && a.status !== 429).map((a) => a.json)),
      );
      for (const a of answers.filter((x) => x.status === 429)) assert.match(String(a.json.error), /capacity/);
      const info = await api('GET', '/v1/info');
      assert.equal(info.json.claimed, 5);
      assert.equal(info.json.at_capacity, true);
    } finally {
      await d.remove();
    }
  });
});
