/**
 * bench/resume — resume anywhere and idle suspend (issue 33) on three sandboxd nodes started as `sbx up --nodes 3`
 * starts them (real microVMs, sandbox/minimal, small = 256 MiB; the default --checkpoint-replicas, so every
 * hibernation is published as a record of kind `hibernation` and copied to one peer; node-1 and node-2 run with
 * --checkpoint-peer-heal, so whichever lacks the copy fetches it). Every round claims four warm VMs on node-0
 * (`POST /v1/claim` from the pool: measurement 1), writes a file in each, and puts each to sleep, then wakes it once:
 *   a. caller hibernate (timed: the hibernate cost), then `POST /v1/sandboxes/{id}/resume` on node-0 (local wake);
 *   b. idle policy 2 s: waits for phase `Suspended`, then `POST .../exec` (the wake inside the exec, and a second
 *      exec right after it: what the exec itself costs);
 *   c. caller hibernate, then `POST /v1/checkpoints/{record}/claim` on the peer holding the copy (tier local);
 *   d. caller hibernate, then the same claim on the peer without it (tier heal: pulled first), beside a plain
 *      loopback copy of the same files (bench/support/loopback-copy.ts, as bench/placement).
 * A record is consumed by its resume, hence one sleep per wake. After each wake the first command (timed) checks that
 * the file is still there; each VM start's phases and the last round's node log lines say where a wake's time goes. The
 * saved state file is read whole (2: the record's load) with the page cache warm before every wake, and cold (the
 * cache dropped machine-wide) after rounds c and d, when nothing measured follows until the next round's warm claim.
 *
 * Targets (issue 33): a local wake <= 1.5 x (warm claim + load); a fetch from a peer <= (warm claim + load) + the
 * record's bytes at 50 % of the loopback copy. Also printed: hibernate s/GiB, the disk a suspended sandbox takes and
 * the suspended:running ratio for `--disk-gib` of disk against this machine's RAM.
 *
 *   node --import tsx bench/resume.ts [--rounds 5] [--disk-gib 100]
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { readClusterEnvironment } from '../src/cluster/index.js';
import { startPlatform } from '../src/cli/platform.js';
import { createLogger } from '../src/log/logger.js';
import { RECORD_FILES } from '../src/sandboxd/placement/record.js';
import { machineIdleSettings } from './machine.js';
import {
  dropCaches,
  duBytes,
  fsTypeOf,
  pssBytes,
  hibernatedVm,
  logMark,
  logTimeline,
  pssByVm,
  readWhole,
  startPhases,
  vmJson,
} from './support/host-probes.js';
import { loopbackCopy, mbps } from './support/loopback-copy.js';
import { NodeApi, summary, timed } from './support/node-api.js';

const args = process.argv.slice(2);
const flag = (name: string, def: number) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? Number(args[i + 1]) : def;
};
const ROUNDS = flag('rounds', 5);
const DISK_GIB = flag('disk-gib', 100);
const TEMPLATE = 'sandbox/minimal';
const IDLE_S = 2;
const api = new NodeApi();
const must = api.must.bind(api);
const GiB = 2 ** 30;

type Kind = 'resume' | 'idle-exec' | 'peer-local' | 'peer-heal';
const KINDS: readonly Kind[] = ['resume', 'idle-exec', 'peer-local', 'peer-heal'];

/** Polls `f` every 50 ms until it answers something (`what` names it in the timeout). */
async function until<T>(what: string, f: () => Promise<T | undefined>, timeoutMs = 120_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await f();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

const row = async (addr: string, id: string) => (await must(addr, 'GET', `/v1/sandboxes/${id}`)).json;
const holds = async (addr: string, ck: string) =>
  ((await must(addr, 'GET', '/v1/checkpoints?kind=hibernation')).json.checkpoints as Array<{ id: string }>).some(
    (c) => c.id === ck,
  );

async function main(): Promise<void> {
  const env = readClusterEnvironment();
  const dataDir = await mkdtemp(join(tmpdir(), 'sbx-bench-resume-'));
  process.stderr.write(`starting the platform (3 sandboxd nodes; node-1 and node-2 heal) in ${dataDir}\n`);
  const platform = await startPlatform({
    cacheDir: env.cacheDir,
    binDir: env.binDir,
    dataDir,
    layout: 'aggregated',
    simulatedNodes: 0,
    sandboxdNodes: 3,
    warm: 1,
    template: TEMPLATE,
    checkpointPeerHeal: ['node-1', 'node-2'],
    // Debug: each VM start logs its phases (vm-core.ts runLoaded), which say what a wake's time goes to.
    sandboxdArgs: ['--log-level=debug'],
    etcdFsync: true,
    logger: createLogger({ level: 'warn', name: 'bench' }),
    progress: (l) => process.stderr.write(`${l}\n`),
  });
  const nodes = platform.sandboxd;
  const [a, b, c] = nodes.map((d) => d.address) as [string, string, string];
  const nameOf = (addr: string) => nodes.find((n) => n.address === addr)!.node;
  const logOf = (addr: string) => join(dataDir, `sandboxd-${nameOf(addr)}.log`);
  try {
    api.token = (await readFile(nodes[0]!.tokenFile, 'utf8')).trim();
    for (const n of [b, c]) await must(n, 'PUT', '/v1/pools', { pools: [] });
    for (const n of [b, c]) {
      await until(`${n} to learn ${a}`, async () =>
        ((await must(n, 'GET', '/v1/info')).json.peers as string[]).includes(a) ? true : undefined,
      );
    }

    const warmClaim: number[] = [];
    const hibernateMs: number[] = [];
    const publishMs: number[] = [];
    const copyMs: number[] = [];
    const loadWarm: number[] = [];
    const loadCold: number[] = [];
    const wake: Record<Kind, number[]> = { resume: [], 'idle-exec': [], 'peer-local': [], 'peer-heal': [] };
    const execAfterWake: number[] = [];
    const firstExec: Record<Kind, number[]> = { resume: [], 'idle-exec': [], 'peer-local': [], 'peer-heal': [] };
    const healPull: Array<{ bytes: number; ms: number }> = [];
    const loopback: Array<{ bytes: number; ms: number }> = [];
    const stateBytes: number[] = [];
    const stateAllocated: number[] = [];
    const recordAllocated: number[] = [];
    const suspendedAllocated: number[] = [];
    const peerCopyAllocated: number[] = [];
    const pssFresh: number[] = [];
    const pssWoken: number[] = [];
    const woken: Array<{ kind: Kind; phasesMs: Record<string, number> }> = [];
    const timeline: Partial<Record<Kind, string[]>> = {};
    let memoryMiB = 0;
    let stateFs = '';

    for (let round = 0; round < ROUNDS; round++) {
      for (const kind of KINDS) {
        process.stderr.write(`round ${round + 1}/${ROUNDS}: ${kind}\n`);
        await api.waitWarm(a, 1);
        const policy = kind === 'idle-exec' ? { idle_hibernate_seconds: IDLE_S } : {};
        const claim = await timed(() =>
          must(a, 'POST', '/v1/claim', { template: TEMPLATE, ttl_seconds: 3600, ...policy }),
        );
        warmClaim.push(claim.ms);
        const id = claim.value.json.id as string;
        const marker = `r${round}-${kind}`;
        await must(a, 'POST', `/v1/sandboxes/${id}/exec`, { argv: ['sh', '-c', `echo ${marker} > /marker`] });
        const root0 = nodes[0]!.vmRunRoot;
        const running = pssByVm(root0);

        // Asleep: by the caller (timed) or by the idle policy; then the record published and copied to one peer.
        const t0 = performance.now();
        if (kind === 'idle-exec') {
          await until('idle suspend', async () => ((await row(a, id)).phase === 'Suspended' ? true : undefined));
        } else {
          await must(a, 'POST', `/v1/sandboxes/${id}/hibernate`, undefined, 204);
          hibernateMs.push(performance.now() - t0);
        }
        const slept = performance.now();
        const ck = await until('the hibernation record', async () => {
          const r = await row(a, id);
          return typeof r.hibernation_checkpoint === 'string' ? r.hibernation_checkpoint : undefined;
        });
        publishMs.push(performance.now() - slept);
        const holder = await until('a copy on a peer', async () => {
          for (const n of [b, c]) if (await holds(n, ck)) return n;
          return undefined;
        });
        copyMs.push(performance.now() - slept);
        const { vm, stateFile } = hibernatedVm(root0);
        memoryMiB = vmJson(join(root0, vm)).memoryMiB;
        pssFresh.push(running.get(vm)!);
        const ckDir = join(dataDir, 'node-0', 'data', 'checkpoints', ck);
        stateFs = fsTypeOf(stateFile);
        const st = await readWhole(stateFile);
        stateBytes.push(st.bytes);
        loadWarm.push(st.ms);
        stateAllocated.push(duBytes(stateFile));
        recordAllocated.push(duBytes(ckDir));
        suspendedAllocated.push(duBytes(stateFile, ckDir));
        peerCopyAllocated.push(duBytes(join(dataDir, nameOf(holder), 'data', 'checkpoints', ck)));

        // The wake.
        let node = a;
        let claimId = id;
        const marks = new Map([a, b, c].map((n) => [n, logMark(logOf(n))] as const));
        const wakeAt = Date.now();
        if (kind === 'resume') {
          wake[kind].push((await timed(() => must(a, 'POST', `/v1/sandboxes/${id}/resume`))).ms);
        } else if (kind === 'idle-exec') {
          const t = await timed(() => must(a, 'POST', `/v1/sandboxes/${id}/exec`, { argv: ['true'] }));
          wake[kind].push(t.ms);
          execAfterWake.push((await timed(() => must(a, 'POST', `/v1/sandboxes/${id}/exec`, { argv: ['true'] }))).ms);
        } else {
          node = kind === 'peer-local' ? holder : holder === b ? c : b;
          if (kind === 'peer-heal') loopback.push(await loopbackCopy(ckDir, RECORD_FILES));
          const t = await timed(() =>
            must(node, 'POST', `/v1/checkpoints/${ck}/claim`, { ttl_seconds: 600, no_redirect: true }),
          );
          const tier = t.value.headers['x-sandboxd-checkpoint-tier'];
          if (tier !== (kind === 'peer-local' ? 'local' : 'heal')) throw new Error(`${kind} answered tier ${tier}`);
          wake[kind].push(t.ms);
          claimId = t.value.json.id as string;
          if (kind === 'peer-heal')
            healPull.push({
              bytes: Number(t.value.headers['x-sandboxd-heal-bytes']),
              ms: Number(t.value.headers['x-sandboxd-heal-ms']),
            });
        }
        // The first command after the wake (for the exec wake, its third): a restored QEMU under TCG has translated
        // no guest code yet, unlike a primed warm VM.
        const first = await timed(() =>
          must(node, 'POST', `/v1/sandboxes/${claimId}/exec`, { argv: ['cat', '/marker'] }),
        );
        firstExec[kind].push(first.ms);
        const cat = first.value;
        if (!String(cat.json.stdout).includes(marker))
          throw new Error(`${kind}: /marker lost: ${JSON.stringify(cat.json)}`);
        // The VM started for the wake: on node-0 the same VM; on a peer the one VM it started (its pool is empty).
        const started = startPhases(logOf(node), marks.get(node)!).filter((s) => node !== a || s.vm === vm);
        woken.push({ kind, phasesMs: started.length === 1 ? started[0]!.phasesMs : {} });
        if (node === a) pssWoken.push(pssBytes(vmJson(join(root0, vm)).pid!));
        if (round === ROUNDS - 1)
          timeline[kind] = logTimeline(logOf(node), marks.get(node)!, wakeAt, [id, vm, claimId]);
        if (node !== a) {
          await api.release(node, claimId);
          // The original still sleeps on node-0 with its state file: read it cold now, nothing measured follows.
          dropCaches();
          loadCold.push((await readWhole(stateFile)).ms);
        }
        await api.release(a, id);
      }
    }

    // What each wake's VM start spent (node logs, debug): qmp = QEMU up, load = state read in, agent = guest answers.
    const phaseSummary = (kind: Kind) => {
      const rows = woken.filter((w) => w.kind === kind).map((w) => w.phasesMs);
      const keys = [...new Set(rows.flatMap((r) => Object.keys(r)))];
      return Object.fromEntries(
        keys.map((k) => [k, summary(rows.map((r) => r[k] ?? NaN).filter(Number.isFinite)).p50]),
      );
    };

    const warmP50 = summary(warmClaim).p50;
    const loadP50 = summary(loadWarm).p50;
    const base = warmP50 + loadP50;
    const recordBytes = summary(healPull.map((p) => p.bytes)).p50;
    const loopMBps = summary(loopback.map((p) => mbps(p.bytes, p.ms))).p50;
    const fetchBudget = base + (recordBytes / 2 ** 20 / (loopMBps * 0.5)) * 1000;
    const verdict = (measured: number, limit: number) => ({
      measured: +measured.toFixed(1),
      limit: +limit.toFixed(1),
      ratio: +(measured / limit).toFixed(2),
      verdict: measured <= limit ? 'pass' : 'miss',
    });
    const hibGiB = memoryMiB / 1024;
    const perSuspended = summary(suspendedAllocated).p50;
    const perRunningWoken = summary(pssWoken).p50;
    const perRunningFresh = summary(pssFresh).p50;
    // Where every node suspends alike, each also keeps one peer's copy per suspended sandbox of that peer.
    const perSuspendedFleet = perSuspended + summary(peerCopyAllocated).p50;
    const suspendedPerNode = Math.floor((DISK_GIB * GiB) / perSuspendedFleet);
    const runningFresh = Math.floor(totalmem() / perRunningFresh);
    const out = {
      machine: machineIdleSettings(),
      memoryMiB,
      stateFileFs: stateFs,
      '1 warmClaimMs': summary(warmClaim),
      '2 recordLoad': {
        stateFileBytes: summary(stateBytes).p50,
        warmCacheMs: summary(loadWarm),
        coldCacheMs: summary(loadCold),
      },
      '3 localWake': {
        resumeMs: summary(wake.resume),
        idleExecMs: summary(wake['idle-exec']),
        execRightAfterMs: summary(execAfterWake),
        firstCatAfterWakeMs: Object.fromEntries(KINDS.map((k) => [k, summary(firstExec[k])])),
        phasesP50Ms: { resume: phaseSummary('resume'), 'idle-exec': phaseSummary('idle-exec') },
      },
      '4 otherNode': {
        tierLocalMs: summary(wake['peer-local']),
        tierLocalOverWarmClaimPlusLoad: +(summary(wake['peer-local']).p50 / base).toFixed(2),
        tierHealMs: summary(wake['peer-heal']),
        healPullMs: summary(healPull.map((p) => p.ms)),
        healPullMBps: summary(healPull.map((p) => mbps(p.bytes, p.ms))),
        healBytes: recordBytes,
        loopbackCopyMBps: summary(loopback.map((p) => mbps(p.bytes, p.ms))),
        phasesP50Ms: { 'peer-local': phaseSummary('peer-local'), 'peer-heal': phaseSummary('peer-heal') },
      },
      '5 hibernate': {
        hibernateMs: summary(hibernateMs),
        secondsPerGiB: +(summary(hibernateMs).p50 / 1000 / hibGiB).toFixed(2),
        recordPublishedAfterMs: summary(publishMs),
        copiedToPeerAfterMs: summary(copyMs),
        stateFileAllocatedBytes: summary(stateAllocated).p50,
        recordAllocatedBytes: summary(recordAllocated).p50,
        suspendedAllocatedBytes: perSuspended,
        peerCopyAllocatedBytes: summary(peerCopyAllocated).p50,
        suspendedWithPeerCopyBytes: perSuspendedFleet,
        secondsPerGiBWritten: +(summary(hibernateMs).p50 / 1000 / (summary(stateBytes).p50 / GiB)).toFixed(2),
        pssRunningWokenBytes: perRunningWoken,
        pssRunningFreshClaimBytes: perRunningFresh,
        nodeRamBytes: totalmem(),
        diskGiB: DISK_GIB,
        suspendedPerNode,
        runningPerNodeWoken: Math.floor(totalmem() / perRunningWoken),
        runningPerNodeFresh: runningFresh,
        diskGiBFor30xFresh: Math.ceil((30 * runningFresh * perSuspendedFleet) / GiB),
        suspendedOverRunningWoken: +(suspendedPerNode / (totalmem() / perRunningWoken)).toFixed(1),
        suspendedOverRunningFresh: +(suspendedPerNode / (totalmem() / perRunningFresh)).toFixed(1),
      },
      lastRoundNodeLog: timeline,
      targets: {
        'local resume <= 1.5 x (warm claim + load)': verdict(summary(wake.resume).p50, 1.5 * base),
        'local idle exec <= 1.5 x (warm claim + load)': verdict(summary(wake['idle-exec']).p50, 1.5 * base),
        'other node, fetch <= (warm claim + load) + bytes at 50 % loopback': verdict(
          summary(wake['peer-heal']).p50,
          fetchBudget,
        ),
      },
    };
    process.stdout.write(`${JSON.stringify(out, null, 2)}\n`);
  } finally {
    await platform.stop();
    await rm(dataDir, { recursive: true, force: true });
  }
}

await main();
