/**
 * A request for a copy (`POST /v1/checkpoints/{id}/replicate`, docs/placement.md "Replicas") on a real sandboxd
 * process whose only peer is hostile: the node pulls from the owners it finds itself and refuses every hostile
 * record as a heal does, keeping nothing; a malformed id, a tenant's token and a node that keeps no copies are
 * refused before any pull. No VMs: nothing is published.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { rmSync, writeFileSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { sandboxdCommand, toSandboxdConfig } from '../../src/sandboxd/options.js';
import { hostileCases, startHostilePeer } from '../support/hostile-peer.js';
import { call, SandboxdProcess } from '../support/sandboxd-daemon.js';

const ROOT = 'root-token-for-replica-tests';
const ID = 'ck_0123456789abcdef';

describe('a request for a copy from a hostile peer', () => {
  const streams = new Map<string, () => Readable>();
  let peer: Awaited<ReturnType<typeof startHostilePeer>>;
  let node: SandboxdProcess;
  const api = (method: string, path: string, token: string | null = ROOT) =>
    call(node.base, method, path, undefined, token);

  before(async () => {
    peer = await startHostilePeer(streams);
    node = await SandboxdProcess.create(`replicas-${randomBytes(3).toString('hex')}`, ROOT, { tenant: 'tenant-tok' });
    // The defaults: with a token and a checkpoint TTL, --checkpoint-replicas is 2.
    await node.start(['--peers', peer.address]);
  });
  after(async () => {
    await node?.remove();
    await peer?.close();
  });

  for (const c of hostileCases(ID, 256 << 20)) {
    it(`refuses: ${c.name}`, async () => {
      streams.set(ID, c.stream);
      const before = peer.requests.length;
      const r = await api('POST', `/v1/checkpoints/${ID}/replicate`);
      assert.equal(r.status, 502, JSON.stringify(r.json));
      assert.match(String(r.json.error), c.error);
      assert.ok(peer.requests.slice(before).includes(`GET /v1/checkpoints/${ID}/blob`), 'the node pulled');
      assert.deepEqual(await readdir(join(node.dataDir, 'checkpoints')), [], 'no record and no staging directory');
      assert.deepEqual((await api('GET', '/v1/checkpoints')).json.checkpoints, []);
    });
  }

  it('an id no peer holds is 404; a malformed id 400; a tenant 403, all before any pull', async () => {
    streams.clear();
    const before = peer.requests.filter((r) => r.startsWith('GET ')).length;
    assert.equal((await api('POST', '/v1/checkpoints/ck_00000000000000ff/replicate')).status, 404);
    for (const bad of ['ck_XYZ', 'ck_0123456789abcdef0', 'nope'])
      assert.equal((await api('POST', `/v1/checkpoints/${bad}/replicate`)).status, 400, bad);
    assert.equal((await api('POST', `/v1/checkpoints/${ID}/replicate`, 'tenant-tok')).status, 403);
    assert.equal(peer.requests.filter((r) => r.startsWith('GET ')).length, before, 'nothing was pulled');
  });

  it('flags: more than one replica needs a checkpoint TTL; a node with one keeps no copies (409)', async () => {
    const d = await SandboxdProcess.create('replica-flags', ROOT);
    try {
      await assert.rejects(
        d.start(['--checkpoint-replicas', '2', '--checkpoint-ttl-hours', '0']),
        /--checkpoint-replicas > 1 needs --checkpoint-ttl-hours > 0/,
      );
      await d.start(['--checkpoint-replicas', '1', '--peers', peer.address]);
      const r = await call(d.base, 'POST', `/v1/checkpoints/${ID}/replicate`, undefined, ROOT);
      assert.equal(r.status, 409, JSON.stringify(r.json));
      assert.match(String(r.json.error), /keeps no copies/);
    } finally {
      await d.remove();
    }
  });
});

describe('--checkpoint-replicas', () => {
  const config = (...args: string[]) =>
    toSandboxdConfig(
      sandboxdCommand()
        .parse(['node', 'sandboxd', ...args])
        .opts(),
    );

  it('is 2 by default with a fleet token and a TTL, else 1; an explicit value needs both', () => {
    const token = join(tmpdir(), `replicas-token-${randomBytes(3).toString('hex')}`);
    writeFileSync(token, ROOT);
    try {
      assert.equal(config('--token-file', token).checkpointReplicas, 2);
      assert.equal(config('--token-file', token).checkpointReplicaIntervalMs, 30_000);
      assert.equal(config('--token-file', token, '--checkpoint-ttl-hours=0').checkpointReplicas, 1);
      assert.equal(config('--allow-anonymous').checkpointReplicas, 1);
      assert.equal(config('--token-file', token, '--checkpoint-replicas=3').checkpointReplicas, 3);
      assert.throws(() => config('--allow-anonymous', '--checkpoint-replicas=2'), /needs --token-file/);
      assert.throws(() => config('--token-file', token, '--checkpoint-replicas=0'), /integer >= 1/);
      assert.throws(() => config('--token-file', token, '--checkpoint-replicas=1.5'), /integer >= 1/);
      assert.throws(() => config('--token-file', token, '--checkpoint-replica-interval=0'), /positive number/);
    } finally {
      rmSync(token, { force: true });
    }
  });
});
