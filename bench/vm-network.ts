/**
 * bench/vm-network: what the egress lane (a network namespace, TAP and nftables ruleset per networked VM, issue 30)
 * costs against a NIC-less VM, side by side in one run, rounds interleaved (the order flips every round):
 *   1. clone -> agent answering of `sandbox/base` built twice, `network: 'egress'` and `'none'` (nothing else
 *      differs): without a spare VMM (the namespace is made on the clone's path) and with one (`--spare-vmms 1`,
 *      sandboxd's default: the namespace was made with the spare). Target: egress <= 1.3x none. Next to it the floor:
 *      making and removing one VM namespace alone (the same code the driver runs), and each VM's destroy;
 *   2. claim from a warm pool through a real sandboxd (pools `sandbox/base:egress=N,sandbox/base:none=N`), a claim
 *      and its release per sample, lanes alternating, every claim from a full, primed pool. Target: <= 1.2x;
 *   3. TCP throughput: python3 in a `sandbox/python` guest sending --mib MiB to a byte counter (node) in a namespace
 *      this bench makes, against the same sender program on the host in a second namespace sending to the same
 *      counter (two namespaces routed by the node, no VM). Target: >= 50 %. Beside it, in the same guest, the floors
 *      that show what a TCG guest can do at all: the same bytes written to /dev/null, sent over the guest's own
 *      loopback, and streamed out as an exec's stdout over the agent's virtio-serial port (no NIC); and the busiest
 *      QEMU thread's share of a core during the guest's transfer (on a CPU, and runnable but waiting for one).
 *
 *   npm run bench -- vm-network [--rounds 20] [--claims 40] [--pool 2] [--mib 32] [--tcp-rounds 5]
 *                               [--parts clone,claim,tcp]
 *
 * About 3-4 minutes with the defaults (after the templates are built). Nothing here contacts an address outside
 * loopback and the namespaces it makes: guests' DNS goes to the counter's namespace (`--vm-resolver`), which answers
 * nothing on port 53, and no guest resolves a name. Every VM namespace the run makes (its own drivers' and its
 * sandboxd's) carries a run marker; one still there at the end fails the run (exit 1) and is removed.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { Agent } from 'node:http';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { ensureGuestImage } from '../src/guest/index.js';
import { namespacesOfRun, type VmNetworks } from '../src/vmm/net/index.js';
import {
  ensureTemplate,
  liveQemuPids,
  QemuMicrovmDriver,
  resolveDriverOptions,
  templateFromImage,
  type Template,
  type Vm,
} from '../src/vmm/index.js';
import { defaultRunRoot } from '../src/sandboxd/engine.js';
import { SandboxdProcess } from '../test/support/sandboxd-daemon.js';
import { testNetns, type TestNetns } from '../test/support/test-netns.js';
import { percentile } from './claim-driver.js';
import { machineIdleSettings } from './machine.js';
import { busiestThread, DEVNULL, LOOPBACK, SENDER, Sink, SINK_PORT, threadSched } from './support/byte-transfer.js';
import { callJson } from './support/http-json.js';

const { values } = parseArgs({
  options: {
    rounds: { type: 'string', default: '20' },
    claims: { type: 'string', default: '40' },
    pool: { type: 'string', default: '2' },
    mib: { type: 'string', default: '32' },
    'tcp-rounds': { type: 'string', default: '5' },
    parts: { type: 'string', default: 'clone,claim,tcp' },
  },
});
const ROUNDS = Number(values.rounds);
const CLAIMS = Number(values.claims);
const POOL = Number(values.pool);
const BYTES = Number(values.mib) * 2 ** 20;
const TCP_ROUNDS = Number(values['tcp-rounds']);
const PARTS = new Set(values.parts.split(','));
const NETS = ['egress', 'none'] as const;
type Net = (typeof NETS)[number];
const progress = (l: string) => process.stderr.write(`  [build] ${l}\n`);

/** Both lanes' order flips every round, so neither always runs first (after the other's clean-up). */
const order = (round: number): readonly Net[] => (round % 2 ? [...NETS].reverse() : NETS);

interface Row {
  what: string;
  egress: number[];
  none: number[];
  unit: string;
  target?: { max?: number; min?: number };
}
const rows: Row[] = [];
const info: string[] = [];

const p50 = (xs: number[]) =>
  percentile(
    [...xs].sort((a, b) => a - b),
    50,
  );
const p90 = (xs: number[]) =>
  percentile(
    [...xs].sort((a, b) => a - b),
    90,
  );
const fmt = (x: number) => (x >= 100 ? x.toFixed(0) : x.toFixed(1));

async function timed<T>(f: () => Promise<T>): Promise<[T, number]> {
  const t = performance.now();
  const out = await f();
  return [out, performance.now() - t];
}

async function until(what: string, ok: () => boolean | Promise<boolean>, ms = 120_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await ok())) {
    if (Date.now() > end) throw new Error(`${what}: not within ${ms / 1000} s`);
    await sleep(20);
  }
}

// ------------------------------------------------------------------------------------------------ 1. clone

async function cloneBench(recv: TestNetns): Promise<void> {
  const runRoot = mkdtempSync(join(tmpdir(), 'sbxn-'));
  // Two drivers on one run root, as bench/vm: one with a spare VMM per template (sandboxd's default), one without.
  const plain = new QemuMicrovmDriver({ runRoot, vmResolver: recv.address });
  const spare = new QemuMicrovmDriver({ runRoot, spareVmms: 1, vmResolver: recv.address });
  try {
    const spec = templateFromImage(await ensureGuestImage('sandbox/base', { progress }));
    const tpl = {} as Record<Net, Template>;
    for (const net of NETS)
      tpl[net] = await plain.createTemplate({ ...spec, name: `sandbox/base@${net}`, network: net }, { progress });
    // The first clone of a template on `spare` starts its spare; it is not measured.
    for (const net of NETS) await (await spare.clone(tpl[net])).destroy();
    // The namespace alone, made and removed by the driver's own VmNetworks (its options: CIDR, slots, resolver).
    const networks = (plain as unknown as { networks: VmNetworks }).networks;
    const r = {
      plain: { egress: [] as number[], none: [] as number[] },
      spare: { egress: [] as number[], none: [] as number[] },
      destroy: { egress: [] as number[], none: [] as number[] },
      nsCreate: [] as number[],
      nsDestroy: [] as number[],
      spawn: [] as number[],
    };
    for (let i = 0; i < ROUNDS; i++) {
      for (const net of order(i)) {
        const [a, ms] = await timed(() => plain.clone(tpl[net]));
        r.plain[net].push(ms);
        r.destroy[net].push((await timed(() => a.destroy()))[1]);
        await until('spare VMM loaded', () => spare.readySpares(tpl[net]) >= 1);
        const [b, ms2] = await timed(() => spare.clone(tpl[net]));
        r.spare[net].push(ms2);
        await b.destroy();
      }
      const [ns, ms] = await timed(() => networks.create(`bench${i}`, undefined));
      r.nsCreate.push(ms);
      r.nsDestroy.push((await timed(() => networks.destroy(ns)))[1]);
      // What one of the `ip` / `nft` / `nsenter` processes a namespace takes costs on its own right now.
      for (let j = 0; j < 3; j++) r.spawn.push((await timed(() => runHost(['ip', 'link', 'show', 'dev', 'lo'])))[1]);
      process.stderr.write(`clone round ${i + 1}/${ROUNDS}\n`);
    }
    const cloneTarget = { max: 1.3 };
    rows.push({ what: 'clone -> agent answering, no spare VMM', ...r.plain, unit: 'ms', target: cloneTarget });
    rows.push({
      what: 'clone -> agent answering, spare VMM (sandboxd default)',
      ...r.spare,
      unit: 'ms',
      target: cloneTarget,
    });
    rows.push({ what: 'destroy (info)', ...r.destroy, unit: 'ms' });
    info.push(
      `floor: one VM namespace alone (veth, TAP, nftables ruleset), made p50 ${fmt(p50(r.nsCreate))} / p90 ` +
        `${fmt(p90(r.nsCreate))} ms, removed p50 ${fmt(p50(r.nsDestroy))} / p90 ${fmt(p90(r.nsDestroy))} ms ` +
        `(n=${ROUNDS}); one \`ip link show dev lo\` process from spawn to exit p50 ${fmt(p50(r.spawn))} / p90 ` +
        `${fmt(p90(r.spawn))} ms (n=${r.spawn.length}; making a namespace runs 8 such processes, removing it 2)`,
    );
  } finally {
    await spare.destroyAll();
    await plain.destroyAll();
    rmSync(runRoot, { recursive: true, force: true });
  }
}

// ------------------------------------------------------------------------------------------------ 2. claim

interface PoolInfo {
  key: { template: string; net: string; size: string };
  warm: number;
  primed: number;
  refilling: number;
}

async function claimBench(recv: TestNetns): Promise<void> {
  const token = 'bench-net-token';
  const d = await SandboxdProcess.create('benchnet', token);
  const agent = new Agent({ keepAlive: true, maxSockets: 4 });
  try {
    await d.start([
      '--pools',
      `sandbox/base:egress=${POOL},sandbox/base:none=${POOL}`,
      '--vm-resolver',
      recv.address,
      '--max-claims',
      '100',
      '--destroy-on-exit',
    ]);
    const url = new URL(d.base);
    info.push(`sandboxd (claims): run root ${defaultRunRoot(d.dataDir)}, spare VMMs 1 per template (its default)`);
    const call = (method: string, path: string, body?: unknown) =>
      callJson({ host: url.hostname, port: Number(url.port), agent, token }, method, path, body);
    const full = async () => {
      const pools = ((await call('GET', '/v1/info')).json.pools ?? []) as PoolInfo[];
      return NETS.every((net) =>
        pools.some((p) => p.key.net === net && p.warm >= POOL && p.primed >= POOL && !p.refilling),
      );
    };
    // A cold cache builds both templates first (cold boots of sandbox/base, minutes under TCG).
    await until('both pools warm and primed', full, 600_000);
    const lat = { egress: [] as number[], none: [] as number[] };
    const release = { egress: [] as number[], none: [] as number[] };
    for (let i = 0; i < CLAIMS; i++) {
      for (const net of order(i)) {
        await until('pools refilled', full);
        // The pool's status does not show the spare VMM its refill clone restarts (for egress: a namespace too):
        // a second lets that finish, so neither lane's claim shares the cores with its own lane's clean-up.
        await sleep(1000);
        const [c, ms] = await timed(() =>
          call('POST', '/v1/claim', { template: 'sandbox/base', net, no_redirect: true, warm_only: true }),
        );
        if (c.status !== 200) throw new Error(`claim ${net}: ${c.status} ${JSON.stringify(c.json)}`);
        lat[net].push(ms);
        const [rel, rms] = await timed(() => call('POST', `/v1/sandboxes/${String(c.json.id)}/release`));
        if (rel.status !== 204) throw new Error(`release ${net}: ${rel.status} ${JSON.stringify(rel.json)}`);
        release[net].push(rms);
      }
    }
    rows.push({ what: `claim from a warm pool of ${POOL} (sandboxd, HTTP)`, ...lat, unit: 'ms', target: { max: 1.2 } });
    rows.push({ what: 'release (info)', ...release, unit: 'ms' });
  } finally {
    agent.destroy();
    await d.remove();
  }
}

// ------------------------------------------------------------------------------------------------ 3. TCP

function runHost(argv: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const c = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    c.stdout.on('data', (b: Buffer) => (out += b.toString()));
    c.once('error', reject);
    c.once('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`${argv[0]} exited ${code}`))));
  });
}

async function guestPython(vm: Vm, code: string, args: string[]): Promise<number> {
  const r = await vm.run(['python3', '-c', code, ...args], { timeoutMs: 600_000 });
  if (r.exitCode !== 0) throw new Error(`guest python3 exited ${r.exitCode}: ${r.stderr.toString().slice(0, 500)}`);
  return Number(r.stdout.toString().trim());
}

/** MiB/s of BYTES from /dev/zero streamed to the host as an exec's stdout: the agent's channel, no NIC. */
async function agentStream(vm: Vm): Promise<number> {
  let bytes = 0;
  const [res, ms] = await timed(() =>
    vm
      .exec(['head', '-c', String(BYTES), '/dev/zero'], { collect: false, onStdout: (b) => (bytes += b.length) })
      .wait(),
  );
  if (res.exitCode !== 0 || bytes !== BYTES) throw new Error(`agent stream: exit ${res.exitCode}, ${bytes} bytes`);
  return BYTES / 2 ** 20 / (ms / 1000);
}

async function tcpBench(recv: TestNetns, send: TestNetns): Promise<void> {
  const runRoot = mkdtempSync(join(tmpdir(), 'sbxn-'));
  const driver = new QemuMicrovmDriver({ runRoot, vmResolver: recv.address });
  const sink = await Sink.start(recv);
  try {
    const tpl = await ensureTemplate(driver, 'sandbox/python', { progress });
    if (tpl.network !== 'egress') throw new Error(`sandbox/python is net=${tpl.network}, not egress`);
    const vm = await driver.clone(tpl);
    const r = {
      vm: [] as number[],
      host: [] as number[],
      devnull: [] as number[],
      loop: [] as number[],
      agent: [] as number[],
    };
    const busiest: Array<{ runPct: number; waitPct: number }> = [];
    const args = [recv.address, String(SINK_PORT), String(BYTES)];
    const mib = BYTES / 2 ** 20;
    for (let i = 0; i < TCP_ROUNDS; i++) {
      for (const side of i % 2 ? (['host', 'vm'] as const) : (['vm', 'host'] as const)) {
        if (side === 'host') {
          await runHost(['nsenter', `--net=/run/netns/${send.name}`, '--', 'python3', '-c', SENDER, ...args]);
        } else {
          const before = threadSched(vm.pid!);
          const [, ms] = await timed(() => guestPython(vm, SENDER, args));
          busiest.push(busiestThread(before, threadSched(vm.pid!), ms));
        }
        r[side].push(await sink.mibps(BYTES));
      }
      r.devnull.push(mib / (await guestPython(vm, DEVNULL, [String(BYTES)])));
      r.loop.push(mib / (await guestPython(vm, LOOPBACK, [String(BYTES)])));
      r.agent.push(await agentStream(vm));
      process.stderr.write(`tcp round ${i + 1}/${TCP_ROUNDS}\n`);
    }
    await vm.destroy();
    rows.push({
      what: `TCP ${mib} MiB, guest -> a namespace (egress) vs namespace -> namespace, no VM`,
      egress: r.vm,
      none: r.host,
      unit: 'MiB/s',
      target: { min: 0.5 },
    });
    info.push(
      `guest floors, same VM, same rounds: python3 writing ${mib} MiB to /dev/null p50 ${fmt(p50(r.devnull))} MiB/s; ` +
        `over the guest's own loopback (sender and reader both in the guest) p50 ${fmt(p50(r.loop))} MiB/s; ` +
        `out of the guest without a NIC (\`head -c\` of /dev/zero as an exec's stdout over the agent's ` +
        `virtio-serial port) p50 ${fmt(p50(r.agent))} MiB/s; ` +
        `busiest QEMU thread during each guest transfer (the vCPU under TCG), % of a core on a CPU + waiting for ` +
        `one: ${busiest.map((b) => `${b.runPct.toFixed(0)} + ${b.waitPct.toFixed(0)}`).join(', ')}`,
    );
  } finally {
    sink.stop();
    await driver.destroyAll();
    rmSync(runRoot, { recursive: true, force: true });
  }
}

// ------------------------------------------------------------------------------------------------ main

function report(started: Date): void {
  const load = readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
  console.log(
    `\negress lane vs NIC-less (bench/vm-network), ${started.toISOString()} to ${new Date().toISOString()}, ` +
      `${cpus().length} cores, loadavg at end ${load}; ${machineIdleSettings()}`,
  );
  console.log(`rounds: clone ${ROUNDS}, claim ${CLAIMS} (pool ${POOL} per lane), TCP ${TCP_ROUNDS}\n`);
  console.log('| measurement | egress p50 / p90 | none p50 / p90 | ratio p50 / p90 | target | |');
  console.log('|---|---|---|---|---|---|');
  for (const r of rows) {
    const [e50, e90, n50, n90] = [p50(r.egress), p90(r.egress), p50(r.none), p90(r.none)];
    const ratio50 = e50 / n50;
    const t = r.target;
    const verdict = t?.max !== undefined ? ratio50 <= t.max : t?.min !== undefined ? ratio50 >= t.min : undefined;
    const target = t?.max !== undefined ? `<= ${t.max}x` : t?.min !== undefined ? `>= ${t.min * 100} %` : '-';
    const ratio = t?.min !== undefined ? `${(ratio50 * 100).toFixed(1)} %` : `${ratio50.toFixed(2)}x`;
    console.log(
      `| ${r.what} (n=${r.egress.length}/${r.none.length}) | ${fmt(e50)} / ${fmt(e90)} ${r.unit} | ` +
        `${fmt(n50)} / ${fmt(n90)} ${r.unit} | ${ratio} / ${(e90 / n90).toFixed(2)}x | ${target} | ` +
        `${verdict === undefined ? '' : verdict ? 'PASS' : 'MISS'} |`,
    );
  }
  for (const l of info) console.log(`\n${l}`);
  console.log('\nsamples, in call order:');
  for (const r of rows) for (const net of NETS) console.log(`  ${r.what}, ${net}: ${r[net].map(fmt).join(' ')}`);
}

/**
 * Namespaces left by this run (their slot files carry the run marker, as the test runner's do): reported, then
 * removed, so a fault in the code measured never leaves the machine with them.
 */
async function removeLeftovers(run: string): Promise<void> {
  const slotDir = resolveDriverOptions().vmNetworkSlotDir;
  const left = namespacesOfRun(slotDir, run);
  if (!left.length) return void console.log(`\nleak check: no VM namespace left by this run`);
  process.exitCode = 1;
  for (const slot of readdirSync(slotDir)) {
    const file = join(slotDir, slot);
    let rec: { netns: string; owner?: string };
    try {
      rec = JSON.parse(readFileSync(file, 'utf8')) as typeof rec;
    } catch {
      continue;
    }
    if (!left.includes(rec.netns)) continue;
    const vmDir = rec.owner && existsSync(rec.owner) ? 'its run root is still there' : 'its run root is gone';
    console.error(`\nleak check FAILED: ${rec.netns} (slot ${slot}, made by ${rec.owner}; ${vmDir}): removed now`);
    await runHost(['sh', '-c', `ip link del sbxv${slot} 2>/dev/null; ip netns del ${rec.netns} 2>/dev/null; true`]);
    rmSync(file, { force: true });
  }
}

const started = new Date();
// Every VM namespace made by this process and the sandboxd it starts carries this marker (src/vmm/options.ts).
const RUN = `bench-vm-network-${randomBytes(4).toString('hex')}`;
process.env.SBX_TEST_RUN_ID = RUN;
// The counter's namespace (also the guests' resolver address: nothing there answers DNS) and the no-VM sender's.
// Documentation addresses (TEST-NET-3), away from test/vm/network.test.ts's .200.
const recv = testNetns('nrecv', '203.0.113.240');
const send = testNetns('nsend', '203.0.113.244');
try {
  if (PARTS.has('clone')) await cloneBench(recv);
  if (PARTS.has('claim')) await claimBench(recv);
  if (PARTS.has('tcp')) await tcpBench(recv, send);
  report(started);
} finally {
  recv.stop();
  send.stop();
  const leftNs = [recv.name, send.name].filter((n) => existsSync(`/run/netns/${n}`));
  if (leftNs.length) console.error(`namespaces left: ${leftNs.join(' ')}`);
  if (liveQemuPids().length) console.error(`leaked QEMU pids: ${liveQemuPids().join(' ')}`);
  await removeLeftovers(RUN);
}
