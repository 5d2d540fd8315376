/**
 * Checkpoint placement across sandboxd nodes (docs/placement.md), on real daemon processes:
 *  - a node with peer heal on refuses every hostile record a "peer" serves (no VMs needed: nothing is published);
 *  - three nodes with real microVMs that learn each other from their NodeInventory objects: local hit, redirect to
 *    the owner, heal (pull once, then local), an owner killed mid-transfer, restarts, delete told to the peers,
 *    and a promoted template.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readdir } from 'node:fs/promises';
import { createServer, Socket, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { freePort } from '../../src/net/free-port.js';
import { getTestCluster } from '../support/cluster.js';
import { eventually } from '../support/eventually.js';
import { hostileCases, startHostilePeer } from '../support/hostile-peer.js';
import { call, SandboxdProcess } from '../support/sandboxd-daemon.js';

const ROOT = 'root-token-for-placement-tests';
const TEMPLATE = 'sandbox/minimal';
const HEAL = ['--checkpoint-peer-heal', '--checkpoint-ttl-hours', '24'];

type Api = (method: string, path: string, body?: unknown) => ReturnType<typeof call>;
const apiOf =
  (d: SandboxdProcess): Api =>
  (method, path, body) =>
    call(d.base, method, path, body, ROOT);

async function entries(dir: string): Promise<string[]> {
  return (await readdir(dir)).sort();
}

describe('peer heal refuses hostile records', () => {
  const streams = new Map<string, () => Readable>();
  let peer: Awaited<ReturnType<typeof startHostilePeer>>;
  let node: SandboxdProcess;
  let api: Api;
  const ID = 'ck_0123456789abcdef';

  before(async () => {
    peer = await startHostilePeer(streams);
    node = await SandboxdProcess.create(`hostile-${randomBytes(3).toString('hex')}`, ROOT);
    await node.start([...HEAL, '--peers', peer.address]);
    api = apiOf(node);
  });
  after(async () => {
    await node?.remove();
    await peer?.close();
  });

  // A small VM's RAM file is 256 MiB; the peer serves records of that shape (so only the hostile part differs).
  for (const c of hostileCases(ID, 256 << 20)) {
    it(`refuses: ${c.name}`, async () => {
      streams.set(ID, c.stream);
      const before = peer.requests.length;
      const r = await api('POST', `/v1/checkpoints/${ID}/claim`, {});
      assert.equal(r.status, 502, JSON.stringify(r.json));
      assert.match(String(r.json.error), c.error);
      assert.match(String(r.json.error), /nothing was published|no partial record/);
      assert.ok(
        peer.requests.slice(before).includes(`GET /v1/checkpoints/${ID}/blob`),
        'the node pulled from the peer',
      );
      assert.deepEqual(await entries(join(node.dataDir, 'checkpoints')), [], 'no record and no staging directory');
      assert.deepEqual((await api('GET', '/v1/checkpoints')).json.checkpoints, []);
    });
  }

  it('a peer that does not hold the record, and heal without owners: 404', async () => {
    streams.clear();
    const r = await api('POST', '/v1/checkpoints/ck_00000000000000ff/claim', {});
    assert.equal(r.status, 404, JSON.stringify(r.json));
    assert.match(String(r.json.error), /not found on this node or its peers/);
  });

  it('flags: heal needs a token and a checkpoint TTL', async () => {
    const d = await SandboxdProcess.create('flags', ROOT);
    try {
      await assert.rejects(
        d.start(['--checkpoint-peer-heal', '--checkpoint-ttl-hours', '0']),
        /--checkpoint-ttl-hours > 0/,
      );
    } finally {
      await d.remove();
    }
  });
});

/**
 * A TCP relay in front of a node that passes `pauseAfter` bytes of its answers, then holds the rest until
 * released: `paused` resolves then, so the test can kill the node behind it mid-transfer.
 */
async function startRelay(target: () => number, pauseAfter: number) {
  let markPaused!: () => void;
  const paused = new Promise<void>((r) => (markPaused = r));
  const sockets = new Set<Socket>();
  const server = createServer((down) => {
    const up = new Socket();
    sockets.add(down).add(up);
    let sent = 0;
    up.connect(target(), '127.0.0.1');
    down.on('data', (c: Buffer) => up.write(c));
    up.on('data', (c: Buffer) => {
      if (sent >= pauseAfter) return;
      sent += c.length;
      down.write(c);
      if (sent >= pauseAfter) markPaused();
    });
    // The node dying closes its side; the puller then sees the transfer cut, not a clean end.
    up.on('close', () => down.destroy());
    down.on('close', () => up.destroy());
    up.on('error', () => down.destroy());
    down.on('error', () => up.destroy());
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    address: `127.0.0.1:${(server.address() as AddressInfo).port}`,
    paused,
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}

describe('checkpoint placement on three nodes (real microVMs, peers from NodeInventory)', () => {
  const suffix = randomBytes(3).toString('hex');
  const nodes: Record<'a' | 'b' | 'c', SandboxdProcess> = {} as never;
  const api: Record<'a' | 'b' | 'c', Api> = {} as never;
  const addr: Record<'a' | 'b' | 'c', string> = {} as never;
  let common: string[];
  let ck = '';

  const exec = async (node: 'a' | 'b' | 'c', id: string, argv: string[]) => {
    const r = await api[node]('POST', `/v1/sandboxes/${id}/exec`, { argv });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    return r.json as { stdout: string; exit_code: number };
  };
  const claimCk = async (node: 'a' | 'b' | 'c', body: Record<string, unknown> = {}) => {
    const res = await fetch(`${nodes[node].base}/v1/checkpoints/${ck}/claim`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ROOT}`, 'content-type': 'application/json' },
      body: JSON.stringify({ ttl_seconds: 600, ...body }),
    });
    const json = (await res.json()) as Record<string, unknown>;
    return { status: res.status, json, tier: res.headers.get('x-sandboxd-checkpoint-tier') };
  };
  const release = (node: 'a' | 'b' | 'c', id: unknown) => api[node]('POST', `/v1/sandboxes/${String(id)}/release`);

  before(async () => {
    const cluster = await getTestCluster();
    // The tiers are what is tested here: no background copies (replicas.test.ts tests those).
    common = [
      ...['--kubeconfig', cluster.kubeconfigPath, '--vk-nodes', '', '--log-level', 'info'],
      ...['--checkpoint-replicas', '1'],
    ];
    for (const n of ['a', 'b', 'c'] as const) {
      const port = await freePort();
      nodes[n] = await SandboxdProcess.create(`placement-${n}-${suffix}`, ROOT, {}, { port });
      api[n] = apiOf(nodes[n]);
      addr[n] = `127.0.0.1:${port}`;
    }
    await nodes.a.start([...common, '--pools', `${TEMPLATE}=1`]);
    await nodes.b.start(common);
    await nodes.c.start([...common, ...HEAL]);
  });
  after(async () => {
    for (const d of Object.values(nodes)) await d?.remove();
  });

  it('each node learns the others from their NodeInventory objects', async () => {
    for (const n of ['a', 'b', 'c'] as const) {
      const others = (['a', 'b', 'c'] as const).filter((o) => o !== n).map((o) => addr[o]);
      await eventually(async () => (await api[n]('GET', '/v1/info')).json.peers as string[], {
        timeoutMs: 60_000,
        until: (peers) => others.every((o) => peers.includes(o)) && !peers.includes(addr[n]),
        what: `node ${n} lists ${others.join(', ')} as peers`,
      });
    }
  });

  it('local hit on the owner, redirect from a node without heal, heal on a node with it (then local)', async () => {
    await eventually(async () => (await api.a('GET', '/v1/info')).json, {
      timeoutMs: 180_000,
      until: (j) => (j.pools as Array<{ warm: number }>)?.[0]?.warm === 1,
      what: 'a warm VM on node a',
    });
    const claim = await api.a('POST', '/v1/claim', { template: TEMPLATE, ttl_seconds: 600 });
    assert.equal(claim.status, 200, JSON.stringify(claim.json));
    const source = claim.json.id as string;
    await exec('a', source, ['sh', '-c', 'echo written-before-the-checkpoint > /data.txt']);
    const made = await api.a('POST', `/v1/sandboxes/${source}/checkpoint`, { name: 'placement' });
    assert.equal(made.status, 200, `${JSON.stringify(made.json)}\n${nodes.a.logs.join('')}`);
    ck = (made.json.checkpoint as { id: string }).id;

    const local = await claimCk('a');
    assert.equal(local.status, 200, JSON.stringify(local.json));
    assert.equal(local.tier, 'local');
    assert.equal(local.json.from_checkpoint, ck);
    assert.equal(
      (await exec('a', local.json.id as string, ['cat', '/data.txt'])).stdout,
      'written-before-the-checkpoint\n',
    );
    await release('a', local.json.id);

    const redirected = await claimCk('b');
    assert.equal(redirected.status, 200, JSON.stringify(redirected.json));
    assert.equal(redirected.tier, 'redirect');
    assert.deepEqual(redirected.json, { redirect: [addr.a] }, 'b names the owner, and nothing else');
    const onlyHere = await claimCk('b', { no_redirect: true });
    assert.equal(onlyHere.status, 404, 'no_redirect is answered for b alone');
    const second = await claimCk('a', { no_redirect: true });
    assert.equal(second.status, 200, 'the redirected claim succeeds on the owner');
    assert.equal(second.json.owner_addr, addr.a);
    await release('a', second.json.id);

    // With an identity (as sandbox-apiserver's create from a snapshot sends): the healed clone carries it.
    const object = { metadata: { namespace: 'ns', name: 'healed' }, spec: { note: 'kept' } };
    const healed = await claimCk('c', { claim_ref: 'ns/healed', object });
    assert.equal(healed.status, 200, `${JSON.stringify(healed.json)}\n${nodes.c.logs.join('')}`);
    assert.equal(healed.tier, 'heal');
    assert.equal(healed.json.owner_addr, addr.c, 'the clone runs on c');
    const row = healed.json.sandbox as Record<string, unknown>;
    assert.deepEqual([row.claim_ref, row.object, row.from_checkpoint], ['ns/healed', object, ck]);
    assert.equal(
      (await exec('c', healed.json.id as string, ['cat', '/data.txt'])).stdout,
      'written-before-the-checkpoint\n',
    );
    const listed = (await api.c('GET', '/v1/checkpoints')).json.checkpoints as Array<Record<string, unknown>>;
    assert.deepEqual(
      listed.map((c) => [c.id, c.name, c.origin, c.via]),
      [[ck, 'placement', `placement-a-${suffix}`, [addr.a]]],
    );
    const again = await claimCk('c');
    assert.equal(again.status, 200);
    assert.equal(again.tier, 'local', 'the second claim on c is a local hit');
    assert.deepEqual(await entries(join(nodes.c.dataDir, 'checkpoints')), [ck], 'no staging directory is left');
    for (const id of [healed.json.id, again.json.id]) await release('c', id);
    await release('a', source);
  });

  it('an owner killed mid-transfer: the pull fails cleanly and the next owner serves the record', async () => {
    assert.ok(ck, 'needs the checkpoint of the test before');
    // b, restarted with heal on, knows a through a relay too (listed first, so it is pulled from first) that
    // holds the stream after 8 MiB, and a and c from NodeInventory.
    const relay = await startRelay(() => Number(addr.a.split(':')[1]), 8 << 20);
    try {
      await nodes.b.stop();
      await nodes.b.start([...common, ...HEAL, '--peers', relay.address]);
      await eventually(async () => (await api.b('GET', '/v1/info')).json.peers as string[], {
        timeoutMs: 60_000,
        until: (peers) => peers[0] === relay.address && peers.includes(addr.a) && peers.includes(addr.c),
        what: 'b knows the relay first, then a and c',
      });
      const claim = claimCk('b');
      await relay.paused;
      await nodes.a.kill();
      const healed = await claim;
      assert.equal(healed.status, 200, `${JSON.stringify(healed.json)}\n${nodes.b.logs.join('')}`);
      assert.equal(healed.tier, 'heal');
      const log = nodes.b.logs.join('');
      assert.match(log, new RegExp(`"owner":"${relay.address}"[^\\n]*pulling a checkpoint from a peer failed`));
      const listed = (await api.b('GET', '/v1/checkpoints')).json.checkpoints as Array<{ via: string[] }>;
      // via is the record's path: a, where it was taken, then c, which healed it from a and served it here.
      assert.deepEqual(listed[0]?.via, [addr.a, addr.c], 'the record came from c, the owner left');
      assert.deepEqual(await entries(join(nodes.b.dataDir, 'checkpoints')), [ck], 'the cut pull left nothing');
      await release('b', healed.json.id);
    } finally {
      await relay.close();
    }
  });

  it('a restart of each node keeps its checkpoints listed and claimable, and leaves no orphaned directory', async () => {
    assert.ok(ck, 'needs the checkpoint of the tests before');
    await nodes.a.start(common); // it was killed
    for (const n of ['b', 'c'] as const) {
      await nodes[n].stop();
      await nodes[n].start([...common, ...HEAL]);
    }
    for (const n of ['a', 'b', 'c'] as const) {
      const listed = (await api[n]('GET', '/v1/checkpoints')).json.checkpoints as Array<{ id: string }>;
      assert.deepEqual(
        listed.map((c) => c.id),
        [ck],
        `node ${n} lists the checkpoint after a restart\n${nodes[n].logs.join('')}`,
      );
      const c = await claimCk(n);
      assert.equal(c.status, 200, `${n}: ${JSON.stringify(c.json)}`);
      assert.equal(c.tier, 'local');
      assert.equal(
        (await exec(n, c.json.id as string, ['cat', '/data.txt'])).stdout,
        'written-before-the-checkpoint\n',
      );
      await release(n, c.json.id);
      assert.deepEqual(await entries(join(nodes[n].dataDir, 'checkpoints')), [ck]);
    }
  });

  it('a delete on one node removes the checkpoint on its peers too', async () => {
    assert.ok(ck, 'needs the checkpoint of the tests before');
    await eventually(async () => (await api.a('GET', '/v1/info')).json.peers as string[], {
      timeoutMs: 60_000,
      until: (peers) => peers.includes(addr.b) && peers.includes(addr.c),
      what: 'a knows b and c again',
    });
    const del = await api.a('DELETE', `/v1/checkpoints/${ck}`);
    assert.equal(del.status, 204);
    for (const n of ['a', 'b', 'c'] as const) {
      assert.deepEqual((await api[n]('GET', '/v1/checkpoints')).json.checkpoints, [], `${n} no longer lists it`);
      assert.deepEqual(await entries(join(nodes[n].dataDir, 'checkpoints')), [], `${n} removed its files`);
    }
    assert.equal((await claimCk('c')).status, 404, 'heal finds no owner left');
    assert.equal((await api.b('DELETE', `/v1/checkpoints/${ck}`)).status, 404, 'a second delete is a 404');
  });

  it('promote: a sandbox published as a node-local template that claims clone from, also after a restart', async () => {
    const claim = await api.a('POST', '/v1/claim', { template: TEMPLATE, ttl_seconds: 600 });
    assert.equal(claim.status, 200, JSON.stringify(claim.json));
    const id = claim.json.id as string;
    await exec('a', id, ['sh', '-c', 'echo promoted-content > /p.txt']);
    // Node-level state: neither the sandbox's own token (header or body) nor a tenant may promote.
    const token = claim.json.token as string;
    const asSandbox = await call(nodes.a.base, 'POST', `/v1/sandboxes/${id}/promote`, { template: 'mine:v1' }, token);
    assert.deepEqual([asSandbox.status, asSandbox.json.error], [401, 'invalid api token'], 'a sandbox token');
    const inBody = await call(
      nodes.a.base,
      'POST',
      `/v1/sandboxes/${id}/promote`,
      { template: 'mine:v1', token },
      null,
    );
    assert.equal(inBody.status, 401, 'a token in the body is no identity');
    const bad = await api.a('POST', `/v1/sandboxes/${id}/promote`, { template: TEMPLATE });
    assert.equal(bad.status, 409, 'a built-in template name cannot be taken');
    const p = await api.a('POST', `/v1/sandboxes/${id}/promote`, { template: 'placement-test:v1' });
    assert.equal(p.status, 200, `${JSON.stringify(p.json)}\n${nodes.a.logs.join('')}`);
    assert.deepEqual(p.json.key, { template: 'placement-test:v1', net: 'none', size: 'small' });
    assert.match(String(p.json.content_digest), /^sha256:[0-9a-f]{64}$/);
    await release('a', id);
    for (const round of ['before', 'after'] as const) {
      if (round === 'after') {
        // An ordinary stop (SIGTERM) with a warm VM left running: the daemon exits, the VM is re-adopted.
        await nodes.a.stop();
        await nodes.a.start(common);
      }
      const c = await api.a('POST', '/v1/claim', { template: 'placement-test:v1', ttl_seconds: 60 });
      assert.equal(c.status, 200, `${round} a restart: ${JSON.stringify(c.json)}`);
      assert.equal((await exec('a', c.json.id as string, ['cat', '/p.txt'])).stdout, 'promoted-content\n', round);
      await release('a', c.json.id);
    }
    const other = await api.a('POST', '/v1/claim', { template: 'placement-test:v1', size: 'medium' });
    assert.equal(other.status, 400, 'the promoted name exists for its own net and size only');
    assert.equal((await entries(join(nodes.a.dataDir, 'templates'))).length, 1, 'one template directory');
  });
});
