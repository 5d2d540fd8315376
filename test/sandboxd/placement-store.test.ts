/**
 * The checkpoint store's placement side without VMs: a pulled record is published by one rename and refused after
 * a delete that came while it was pulled; --checkpoint-ttl-hours ages records out; a start removes staging
 * directories a crash left and keeps the records state.json names.
 */
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { silentLogger } from '../../src/log/logger.js';
import { Checkpoints } from '../../src/sandboxd/checkpoints.js';
import { QemuMicrovmDriver } from '../../src/vmm/index.js';

const KEY = { template: 'sandbox/minimal', net: 'none', size: 'small' } as const;

describe('checkpoint store: publish, tombstones, TTL, restore', () => {
  let root: string;
  let driver: QemuMicrovmDriver;
  before(async () => {
    root = await mkdtemp(join(tmpdir(), 'sbx-store-'));
    driver = new QemuMicrovmDriver({ runRoot: join(root, 'run'), templateRoot: join(root, 'templates') });
  });
  after(async () => rm(root, { recursive: true, force: true }));

  async function staged(store: Checkpoints): Promise<string> {
    const dir = join(await store.stagingDir(), 'export');
    await mkdir(dir);
    await writeFile(join(dir, 'template.json'), JSON.stringify({ name: 't', memoryMiB: 256 }));
    for (const f of ['mem', 'state']) await writeFile(join(dir, f), f);
    return dir;
  }
  const rec = (id: string, createdAt = new Date().toISOString()) => ({
    id,
    sandboxId: 'sb_1',
    key: KEY,
    createdAt,
    origin: 'node-a',
    via: ['127.0.0.1:1'],
  });

  it('publish renames the staged directory into place; a delete during the pull keeps it out', async () => {
    const ckRoot = join(root, 'ck1');
    const store = new Checkpoints(driver, ckRoot, silentLogger);
    const since = Date.now();
    const dir = await staged(store);
    const ck = await store.publish(rec('ck_00000000000000a1'), dir, since);
    assert.equal(ck.template.dir, join(ckRoot, 'ck_00000000000000a1'));
    assert.deepEqual((await readdir(ck.template.dir)).sort(), ['mem', 'state', 'template.json']);
    assert.equal(store.list().length, 1);

    const started = Date.now();
    const dir2 = await staged(store);
    store.delete('ck_00000000000000a2'); // the fleet was told to delete it while this node pulled it
    await assert.rejects(store.publish(rec('ck_00000000000000a2'), dir2, started), /deleted while it was being pulled/);
    const dir3 = await staged(store);
    await assert.rejects(store.publish(rec('not-an-id'), dir3, started), /malformed/);
  });

  it('expire() deletes records older than the TTL, files and all', async () => {
    const ckRoot = join(root, 'ck2');
    const store = new Checkpoints(driver, ckRoot, silentLogger);
    const old = new Date(Date.now() - 3 * 3_600_000).toISOString();
    await store.publish(rec('ck_00000000000000b1', old), await staged(store), Date.now());
    await store.publish(rec('ck_00000000000000b2'), await staged(store), Date.now());
    assert.deepEqual(store.expire(2 * 3_600_000), ['ck_00000000000000b1']);
    assert.deepEqual(
      store.list().map((c) => c.id),
      ['ck_00000000000000b2'],
    );
    assert.deepEqual(
      (await readdir(ckRoot)).filter((e) => !e.startsWith('.staging-')),
      ['ck_00000000000000b2'],
    );
  });

  it('restore() keeps the saved records and removes staging directories and unrecorded ones', async () => {
    const ckRoot = join(root, 'ck3');
    const first = new Checkpoints(driver, ckRoot, silentLogger);
    await first.publish(rec('ck_00000000000000c1'), await staged(first), Date.now());
    await staged(first); // a pull cut off by a crash
    await mkdir(join(ckRoot, 'ck_00000000000000c9')); // a record whose state write never happened
    const saved = JSON.parse(JSON.stringify(first.list()));
    const second = new Checkpoints(driver, ckRoot, silentLogger);
    // Removed: the cut pull's staging dir, the published one's (emptied by the rename; heal removes it), the orphan.
    assert.deepEqual(second.restore(saved), { restored: 1, removed: 3 });
    assert.deepEqual(await readdir(ckRoot), ['ck_00000000000000c1']);
    assert.equal(second.get('ck_00000000000000c1')?.origin, 'node-a', 'lineage survives a restart');
  });
});
