/**
 * The simulated engine keeps the real engine's contract where the fleet benchmark depends on it: one scenario (warm
 * claim, checkpoint, claim from the checkpoint, fork, release, bad input, a crash and restart, deleting the
 * checkpoint) runs through the HTTP API of two sandboxd processes side by side, one on real QEMU microVMs and one
 * with `--engine=sim`, and every answer (status and body, ids and times replaced by placeholders that keep which id
 * is which), the checkpoint's files on disk, the state file's records and the published NodeInventory must be the
 * same. Where they differ by design, the difference is asserted: the simulated node names itself (/v1/info, the
 * engine label of its metrics, the NodeInventory annotation), and its VMs do not outlive a crash (its checkpoints do).
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { silentLogger } from '../../src/log/logger.js';
import { readEngineState, type SavedState } from '../../src/sandboxd/engine-state.js';
import { getTestCluster, type TestCluster } from '../support/cluster.js';
import { eventually } from '../support/eventually.js';
import { call, SandboxdProcess } from '../support/sandboxd-daemon.js';

const ROOT = 'root-token-for-parity-tests';
type Engine = 'qemu' | 'sim';

/** Keys whose values differ between any two runs (ids, secrets, times, addresses). */
const VARYING = new Set([
  'id',
  'token',
  'deadline',
  'claimed_at',
  'updated_at',
  'created_at',
  'createdAt',
  'claimedAt',
  'updatedAt',
  'sandbox_id',
  'sandboxId',
  'from_checkpoint',
  'fromCheckpoint',
  'owner_addr',
  'addr',
  'vmId',
]);

/** The ids seen so far (each with its placeholder) and the first change counter (`rv`) seen. */
interface Seen {
  ids: Map<string, string>;
  rv0?: number;
}

/**
 * `v` with every varying value replaced: an id by `<id N>` in order of first appearance, also inside a message (so
 * "this is the sandbox the checkpoint was taken of" still compares), a change counter by its distance from the
 * first one seen (a node's counter starts from its start time), anything else by `<type>`. A varying value must
 * not be empty.
 */
function shape(v: unknown, seen: Seen, key = ''): unknown {
  if (Array.isArray(v)) return v.map((x) => shape(x, seen));
  if (v && typeof v === 'object')
    return Object.fromEntries(
      Object.entries(v)
        // A checkpoint's `copies` is the replicator's last count, made in the background (docs/placement.md
        // "Replicas"): whether a listing has it yet is timing, not behaviour. test/sandboxd/replicas.test.ts covers it.
        .filter(([k]) => k !== 'copies')
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([k, x]) => [k, shape(x, seen, k)]),
    );
  if (key === 'rv' && typeof v === 'number') {
    seen.rv0 ??= v;
    return `<rv +${v - seen.rv0}>`;
  }
  if (typeof v === 'string' && /^(id|sandbox_id|sandboxId|from_checkpoint|fromCheckpoint|vmId)$/.test(key)) {
    if (v.length === 0) return '<empty!>';
    if (!seen.ids.has(v)) seen.ids.set(v, `<id ${seen.ids.size + 1}>`);
    return seen.ids.get(v);
  }
  if (VARYING.has(key)) return typeof v === 'string' && v.length === 0 ? '<empty!>' : `<${typeof v}>`;
  return typeof v === 'string' ? withIds(v, seen) : v;
}

/** `s` with every id seen replaced by its placeholder. */
function withIds(s: string, seen: Seen): string {
  return [...seen.ids].reduce((out, [id, label]) => out.split(id).join(label), s);
}

/** An array whose order carries no meaning (rows keyed by random ids), in a fixed order. */
function unordered(v: unknown): unknown {
  return Array.isArray(v) ? [...v].sort((a, b) => JSON.stringify(a).localeCompare(JSON.stringify(b))) : v;
}

/**
 * The state file's records, shaped. A checkpoint's template is the engine's own (its image, hash and boot time
 * are the driver's): what must agree is that it has the same fields, names the same template and lies in the
 * checkpoint's directory; the simulated one also says it is simulated.
 */
function stateShape(s: SavedState, dataDir: string, seen: Seen): unknown {
  const rel = (p: unknown) => (typeof p === 'string' ? withIds(p.replace(dataDir, '<data>'), seen) : p);
  // A checkpoint's file digests (placement's record: docs/placement.md) are of the driver's own files, a real
  // snapshot or a simulated record: the same files must be listed, their bytes differ by design.
  const digests = (files: unknown) =>
    Array.isArray(files)
      ? files.map((f: Record<string, unknown>) => ({ ...f, sha256: '<sha256>', size: '<size>' }))
      : files;
  const checkpoints = (s.checkpoints ?? []).map(({ template: t, ...ck }) => ({
    ...(shape({ ...ck, ...('files' in ck ? { files: digests(ck.files) } : {}) }, seen) as object),
    template: {
      fields: Object.keys(t)
        .filter((k) => k !== 'simulated')
        .sort(),
      name: typeof t.name === 'string' ? withIds(t.name, seen) : t.name,
      memoryMiB: t.memoryMiB,
      vcpus: t.vcpus,
      network: t.network,
      files: [rel(t.dir), rel(t.memFile), rel(t.stateFile)],
    },
  }));
  return { claims: unordered(shape(s.claims, seen)), targets: s.targets, checkpoints };
}

interface Run {
  engine: Engine;
  /** Every step's status and shaped body, in order. */
  steps: Array<[string, number, unknown]>;
  info: Record<string, unknown>;
  metrics: string;
  checkpointFiles: string[];
  state: unknown;
  inventory: { annotations: Record<string, string>; entries: unknown; pools: unknown };
  claimsAfterCrash: number;
  checkpointsAfterCrash: unknown;
  checkpointDirsAtEnd: string[];
}

async function scenario(cluster: TestCluster, engine: Engine): Promise<Run> {
  const node = `parity-${engine}-${randomBytes(3).toString('hex')}`;
  const d = await SandboxdProcess.create(node, ROOT);
  const api = (method: string, path: string, body?: unknown) => call(d.base, method, path, body, ROOT);
  const seen: Seen = { ids: new Map() };
  const steps: Run['steps'] = [];
  const step = async (name: string, method: string, path: string, body?: unknown) => {
    const r = await api(method, path, body);
    steps.push([name, r.status, shape(r.json, seen)]);
    return r;
  };
  const common = ['--vk-nodes=', '--kubeconfig', cluster.kubeconfigPath, '--publish-interval', '1'];
  const engineArgs = engine === 'sim' ? ['--engine=sim', '--sim-clone-ms=50'] : [];
  try {
    await d.start([...common, ...engineArgs, '--pools', 'sandbox/minimal=1']);
    const info = await eventually(async () => (await api('GET', '/v1/info')).json, {
      timeoutMs: 180_000,
      until: (j) => (j.pools as Array<{ warm: number }> | undefined)?.[0]?.warm === 1,
      what: `a warm VM on the ${engine} node`,
    });
    const metrics = await (await fetch(`${d.base}/metrics`, { headers: { authorization: `Bearer ${ROOT}` } })).text();

    const claim = await step('claim', 'POST', '/v1/claim', {
      template: 'sandbox/minimal',
      ttl_seconds: 600,
      claim_ref: 'parity/a',
      object: { metadata: { name: 'a', namespace: 'parity' } },
    });
    assert.equal(claim.status, 200, `${engine}: ${JSON.stringify(claim.json)}\n${d.logs.join('')}`);
    const sandbox = (claim.json.sandbox as { id: string }).id;
    const counted = await (await fetch(`${d.base}/metrics`, { headers: { authorization: `Bearer ${ROOT}` } })).text();
    assert.match(counted, /^sandboxd_claims_total\{tier="warm"\} 1$/m, `${engine}: a claim with its object is counted`);
    assert.match(counted, /^sandboxd_claim_seconds_count\{tier="warm"\} 1$/m);
    await step('get', 'GET', `/v1/sandboxes/${sandbox}`);
    await step('same object again', 'POST', '/v1/claim', {
      template: 'sandbox/minimal',
      claim_ref: 'parity/a',
      object: { metadata: { name: 'a', namespace: 'parity' } },
    });
    await step('unknown template', 'POST', '/v1/claim', { template: 'sandbox/no-such-template' });
    await step('fork 0', 'POST', `/v1/sandboxes/${sandbox}/fork`, { count: 0 });
    await step('fork 65', 'POST', `/v1/sandboxes/${sandbox}/fork`, { count: 65 });
    const ck = await step('checkpoint', 'POST', `/v1/sandboxes/${sandbox}/checkpoint`, { name: 'snap' });
    assert.equal(ck.status, 200, `${engine}: ${JSON.stringify(ck.json)}\n${d.logs.join('')}`);
    const ckId = (ck.json.checkpoint as { id: string }).id;
    const checkpointFiles = (await readdir(join(d.dataDir, 'checkpoints', ckId))).sort();
    await step('checkpoints', 'GET', '/v1/checkpoints');
    const fromCk = await step('claim the checkpoint', 'POST', `/v1/checkpoints/${ckId}/claim`, { ttl_seconds: 600 });
    assert.equal(fromCk.status, 200, `${engine}: ${JSON.stringify(fromCk.json)}\n${d.logs.join('')}`);
    await step('claim a missing checkpoint', 'POST', '/v1/checkpoints/ck_0000000000000000/claim', {});
    const fork = await step('fork 1', 'POST', `/v1/sandboxes/${sandbox}/fork`, { count: 1, ttl_seconds: 600 });
    assert.equal(fork.status, 200, `${engine}: ${JSON.stringify(fork.json)}\n${d.logs.join('')}`);
    await step('pause', 'POST', `/v1/sandboxes/${sandbox}/pause`);
    await step('fork while paused', 'POST', `/v1/sandboxes/${sandbox}/fork`, { count: 1 });
    await step('resume', 'POST', `/v1/sandboxes/${sandbox}/resume`);
    await step('release', 'POST', `/v1/sandboxes/${sandbox}/release`);
    await step('release again', 'POST', `/v1/sandboxes/${sandbox}/release`);
    await step('get released', 'GET', `/v1/sandboxes/${sandbox}`);
    const list = await api('GET', '/v1/sandboxes');
    const live = (list.json.sandboxes as Array<{ id: string }>).map((x) => x.id).sort();
    steps.push(['list', list.status, unordered(shape(list.json.sandboxes, seen))]);

    // The state file is written off the claim path (coalesced): wait until it has the claim table the API shows.
    const state = await eventually(async () => readEngineState(join(d.dataDir, 'state.json'), silentLogger), {
      until: (s) => JSON.stringify(s.claims.map((c) => c.id).sort()) === JSON.stringify(live),
      what: `${engine}: the state file with the live claims the API lists`,
    });
    const inv = await eventually(
      async () =>
        JSON.parse(await cluster.kubectl(['get', 'nodeinventory', node, '-o', 'json'])) as {
          metadata: { annotations?: Record<string, string> };
          entries?: unknown[];
          pools?: unknown[];
        },
      {
        // A publish that shows every live claim (the released one gone) and the refilled pool.
        until: (o) =>
          JSON.stringify((o.entries as Array<{ id: string }> | undefined)?.map((x) => x.id).sort()) ===
            JSON.stringify(live) && (o.pools?.[0] as { warm?: number } | undefined)?.warm === 1,
        timeoutMs: 120_000,
        what: `${engine}: NodeInventory with the live claims and the pool refilled`,
      },
    );

    // A crash: the checkpoint is on disk either way.
    await d.kill();
    await d.start([...common, ...engineArgs, '--destroy-on-exit']);
    const claimsAfterCrash = ((await api('GET', '/v1/sandboxes')).json.sandboxes as unknown[]).length;
    const checkpointsAfterCrash = shape((await api('GET', '/v1/checkpoints')).json, seen);
    await step('delete the checkpoint', 'DELETE', `/v1/checkpoints/${ckId}`);
    await step('delete it again', 'DELETE', `/v1/checkpoints/${ckId}`);
    const checkpointDirsAtEnd = await readdir(join(d.dataDir, 'checkpoints'));
    await cluster.kubectl(['delete', 'nodeinventory', node, '--ignore-not-found']);
    return {
      engine,
      steps,
      info,
      metrics,
      checkpointFiles,
      state: stateShape(state, d.dataDir, seen),
      inventory: {
        annotations: inv.metadata.annotations ?? {},
        entries: unordered(shape(inv.entries, seen)),
        pools: inv.pools,
      },
      claimsAfterCrash,
      checkpointsAfterCrash,
      checkpointDirsAtEnd,
    };
  } catch (err) {
    throw new Error(`${engine} node: ${(err as Error).message}\n${d.logs.join('').slice(-4000)}`, { cause: err });
  } finally {
    await d.remove();
  }
}

describe('the simulated engine against the real one', () => {
  it('answers the same scenario the same way (claims, release, checkpoints, fork, bad input) and says it is simulated', async () => {
    const cluster = await getTestCluster();
    const [real, sim] = await Promise.all([scenario(cluster, 'qemu'), scenario(cluster, 'sim')]);

    // The contract: the same statuses and bodies step by step, the same checkpoint files and records. Every
    // difference is listed at once.
    const compared: Array<[string, unknown, unknown]> = [
      ...real.steps.map((r, i): [string, unknown, unknown] => [`step ${r[0]}`, r.slice(1), sim.steps[i]?.slice(1)]),
      ['step names', real.steps.map((r) => r[0]), sim.steps.map((r) => r[0])],
      ['checkpoint files', real.checkpointFiles, sim.checkpointFiles],
      ['state file', real.state, sim.state],
      ['NodeInventory entries', real.inventory.entries, sim.inventory.entries],
      ['NodeInventory pools', real.inventory.pools, sim.inventory.pools],
      ['checkpoints after the crash', real.checkpointsAfterCrash, sim.checkpointsAfterCrash],
    ];
    const differ = compared
      .filter(([, r, m]) => JSON.stringify(r) !== JSON.stringify(m))
      .map(([what, r, m]) => `${what}:\n  real ${JSON.stringify(r)}\n  sim  ${JSON.stringify(m)}`);
    assert.deepEqual(differ, [], differ.join('\n'));
    const byStep = new Map(real.steps.map(([name, status]) => [name, status]));
    for (const [name, status] of [
      ['claim', 200],
      ['same object again', 409],
      ['unknown template', 400],
      ['fork 0', 400],
      ['checkpoint', 200],
      ['claim a missing checkpoint', 404],
      ['fork while paused', 409],
      ['release', 204],
      ['release again', 404],
      ['get released', 404],
      ['delete the checkpoint', 204],
      ['delete it again', 404],
    ] as const)
      assert.equal(byStep.get(name), status, `${name} on the real engine`);

    assert.ok(real.checkpointFiles.includes('template.json'), real.checkpointFiles.join(','));
    // Checkpoints survive a crash on both; deleting one removes its directory.
    assert.equal((real.checkpointsAfterCrash as { checkpoints: unknown[] }).checkpoints.length, 1);
    assert.deepEqual(real.checkpointDirsAtEnd, []);
    assert.deepEqual(sim.checkpointDirsAtEnd, []);
    // By design: real VMs outlive the daemon and are re-adopted; simulated ones are records of the dead process.
    assert.equal(real.claimsAfterCrash, 2);
    assert.equal(sim.claimsAfterCrash, 0);

    // Only the simulation says it is one: /v1/info, the engine label on every pool series, NodeInventory.
    assert.equal(real.info.engine, 'qemu');
    assert.equal(real.info.simulation, undefined);
    assert.equal(sim.info.engine, 'sim');
    assert.deepEqual(sim.info.simulation, {
      note: 'simulated VMM (sandboxd --engine=sim): no VM runs behind this sandbox',
      clone_ms: 50,
    });
    assert.match(real.metrics, /^sandboxd_pool_warm\{engine="qemu",template="sandbox\/minimal"[^}]*\} 1$/m);
    assert.match(sim.metrics, /^sandboxd_pool_warm\{engine="sim",template="sandbox\/minimal"[^}]*\} 1$/m);
    assert.match(sim.metrics, /^sandboxd_claimed\{engine="sim"\} 0$/m);
    assert.doesNotMatch(real.metrics, /engine="sim"/);
    assert.equal(real.inventory.annotations['sandbox.cocoonstack.io/simulation'], undefined);
    assert.match(sim.inventory.annotations['sandbox.cocoonstack.io/simulation'] ?? '', /^simulated VMM/);
  });
});
