/**
 * bench/placement — claims from a checkpoint on three sandboxd nodes started as `sbx up --nodes 3
 * --checkpoint-peer-heal node-2` starts them (real microVMs, sandbox/minimal, small = 256 MiB), in one run:
 *   1. a plain warm claim (POST /v1/claim served from the pool) and a clone from the template of the same size
 *      (the pool drained, so the claim clones), beside a local hit (POST /v1/checkpoints/{id}/claim on the owner);
 *   2. a redirect: the claim on a node without heal answers {"redirect": [owner]}, the caller claims there with
 *      no_redirect (both hops counted, and the first alone);
 *   3. the first heal on node-2: the pull (its MB/s, from the x-sandboxd-heal-* headers) and the whole claim; the
 *      healed copy is deleted on node-2 alone (?no_forward=1) between rounds, so every round is a first heal;
 *   4. a plain loopback copy of the same bytes: the checkpoint's files over HTTP from this process to another
 *      node process that writes them to disk and syncs them, as the heal does.
 * Each claimed VM is released before the next claim. Targets (issue 20): local hit <= 1.5x the template clone,
 * heal throughput >= 50 % of the loopback copy.
 *
 *   node --import tsx bench/placement.ts [--rounds 10] [--heals 4]
 */
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { readClusterEnvironment } from '../src/cluster/index.js';
import { startPlatform } from '../src/cli/platform.js';
import { createLogger } from '../src/log/logger.js';
import { RECORD_FILES } from '../src/sandboxd/placement/record.js';
import { machineIdleSettings } from './machine.js';
import { loopbackCopy, mbps } from './support/loopback-copy.js';
import { NodeApi, summary, timed, type Answer } from './support/node-api.js';

const args = process.argv.slice(2);
const flag = (name: string, def: number) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? Number(args[i + 1]) : def;
};
const ROUNDS = flag('rounds', 10);
const HEALS = flag('heals', 4);
const TEMPLATE = 'sandbox/minimal';
const api = new NodeApi();
const must = api.must.bind(api);
const waitWarm = api.waitWarm.bind(api);

async function main(): Promise<void> {
  const env = readClusterEnvironment();
  const dataDir = await mkdtemp(join(tmpdir(), 'sbx-bench-placement-'));
  process.stderr.write(`starting the platform (3 sandboxd nodes; node-2 heals) in ${dataDir}\n`);
  const platform = await startPlatform({
    cacheDir: env.cacheDir,
    binDir: env.binDir,
    dataDir,
    layout: 'aggregated',
    simulatedNodes: 0,
    sandboxdNodes: 3,
    warm: 1,
    template: TEMPLATE,
    checkpointPeerHeal: ['node-2'],
    // The tiers are measured: no background copies (docs/placement.md "Replicas"), or b and c would hold the record.
    sandboxdArgs: ['--checkpoint-replicas=1'],
    etcdFsync: true,
    logger: createLogger({ level: 'warn', name: 'bench' }),
    progress: (l) => process.stderr.write(`${l}\n`),
  });
  try {
    const [a, b, c] = platform.sandboxd.map((d) => d.address) as [string, string, string];
    api.token = (await readFile(platform.sandboxd[0]!.tokenFile, 'utf8')).trim();
    // Nodes 1 and 2 need no warm VMs (they would only take CPU from the measured node).
    for (const n of [b, c]) await must(n, 'PUT', '/v1/pools', { pools: [] });
    await waitWarm(a, 1);
    for (const n of [b, c]) {
      for (let i = 0; ; i++) {
        const peers = (await must(n, 'GET', '/v1/info')).json.peers as string[];
        if (peers.includes(a)) break;
        if (i > 240) throw new Error(`${n} never learned ${a} from NodeInventory`);
        await sleep(250);
      }
    }

    // The checkpoint every tier claims from: a warm VM with a file written, checkpointed on node-0.
    const src = await must(a, 'POST', '/v1/claim', { template: TEMPLATE, ttl_seconds: 3600 });
    const srcId = src.json.id as string;
    await must(a, 'POST', `/v1/sandboxes/${srcId}/exec`, { argv: ['sh', '-c', 'echo bench > /b.txt'] });
    const ck = (
      (await must(a, 'POST', `/v1/sandboxes/${srcId}/checkpoint`, { name: 'bench' })).json.checkpoint as {
        id: string;
      }
    ).id;
    const ckDir = join(dataDir, 'node-0', 'data', 'checkpoints', ck);
    let recordBytes = 0;
    for (const f of RECORD_FILES) recordBytes += (await stat(join(ckDir, f))).size;
    await must(a, 'POST', `/v1/sandboxes/${srcId}/release`, undefined, 204);
    const release = (addr: string, r: Answer) =>
      must(addr, 'POST', `/v1/sandboxes/${String(r.json.id)}/release`, undefined, 204);

    // 1. Warm claims (the pool refilled before each), then clones from the template beside local hits.
    const warm: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      await waitWarm(a, 1);
      const t = await timed(() => must(a, 'POST', '/v1/claim', { template: TEMPLATE, ttl_seconds: 60 }));
      warm.push(t.ms);
      await release(a, t.value);
    }
    await must(a, 'PUT', '/v1/pools', { pools: [] });
    await sleep(2000);
    const clone: number[] = [];
    const local: number[] = [];
    for (let i = 0; i < ROUNDS + 1; i++) {
      const t1 = await timed(() => must(a, 'POST', '/v1/claim', { template: TEMPLATE, ttl_seconds: 60 }));
      if (t1.value.json.redirect) throw new Error('a template clone was redirected');
      await release(a, t1.value);
      const t2 = await timed(() => must(a, 'POST', `/v1/checkpoints/${ck}/claim`, { ttl_seconds: 60 }));
      await release(a, t2.value);
      // The first of each starts its template's spare VMM; later ones take a spare, as steady state does.
      if (i === 0) continue;
      clone.push(t1.ms);
      local.push(t2.ms);
    }

    // 2. Redirect: both hops.
    const redirect: number[] = [];
    const hop1: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      const t0 = performance.now();
      const r1 = await must(b, 'POST', `/v1/checkpoints/${ck}/claim`, { ttl_seconds: 60 });
      hop1.push(performance.now() - t0);
      const to = (r1.json.redirect as string[] | undefined)?.[0];
      if (to !== a) throw new Error(`expected a redirect to ${a}: ${JSON.stringify(r1.json)}`);
      const r2 = await must(to, 'POST', `/v1/checkpoints/${ck}/claim`, { ttl_seconds: 60, no_redirect: true });
      redirect.push(performance.now() - t0);
      await release(a, r2);
    }

    // 3. First heals on node-2 (its copy removed there alone between rounds).
    const heal: number[] = [];
    const pull: Array<{ bytes: number; ms: number }> = [];
    for (let i = 0; i < HEALS; i++) {
      if (i > 0) await must(c, 'DELETE', `/v1/checkpoints/${ck}?no_forward=1`, undefined, 204);
      const t = await timed(() => must(c, 'POST', `/v1/checkpoints/${ck}/claim`, { ttl_seconds: 60 }));
      if (t.value.headers['x-sandboxd-checkpoint-tier'] !== 'heal') throw new Error('node-2 did not heal');
      heal.push(t.ms);
      pull.push({
        bytes: Number(t.value.headers['x-sandboxd-heal-bytes']),
        ms: Number(t.value.headers['x-sandboxd-heal-ms']),
      });
      await release(c, t.value);
    }
    const healLocal = await timed(() => must(c, 'POST', `/v1/checkpoints/${ck}/claim`, { ttl_seconds: 60 }));
    await release(c, healLocal.value);

    // 4. The same bytes, copied plainly.
    const copies: Array<{ bytes: number; ms: number }> = [];
    for (let i = 0; i < HEALS; i++) copies.push(await loopbackCopy(ckDir, RECORD_FILES));

    const pullMBps = summary(pull.map((p) => mbps(p.bytes, p.ms)));
    const copyMBps = summary(copies.map((p) => mbps(p.bytes, p.ms)));
    const s = {
      machine: machineIdleSettings(),
      record: { bytes: recordBytes, onDisk: (await stat(join(ckDir, 'mem'))).blocks * 512 },
      warmClaimMs: summary(warm),
      templateCloneMs: summary(clone),
      localHitMs: summary(local),
      redirectBothHopsMs: summary(redirect),
      redirectFirstHopMs: summary(hop1),
      firstHealClaimMs: summary(heal),
      healPullMs: summary(pull.map((p) => p.ms)),
      healPullMBps: pullMBps,
      loopbackCopyMBps: copyMBps,
      afterHealLocalHitMs: +healLocal.ms.toFixed(1),
      targets: {
        localHitOverClone: +(summary(local).p50 / summary(clone).p50).toFixed(2),
        healOverLoopback: +(pullMBps.p50 / copyMBps.p50).toFixed(2),
      },
    };
    process.stdout.write(`${JSON.stringify(s, null, 2)}\n`);
  } finally {
    await platform.stop();
    await rm(dataDir, { recursive: true, force: true });
  }
}

await main();
