/**
 * bench/e2b — the e2b SDK's create-to-first-command against what the platform does underneath, in one run:
 *
 *   node --import tsx bench/e2b.ts [--samples 20] [--rounds 2] [--warm 10] [--file-mib 64]
 *
 * On the aggregated platform exactly as `sbx up --layout aggregated` starts it (one sandboxd node, real QEMU
 * microVMs, template sandbox/base through the e2b alias `base`, primed warm pools):
 * - SDK: `Sandbox.create('base')` → `commands.run('echo hi')` done (the unmodified SDK: control plane, router,
 *   envd), the sandbox killed afterwards (not timed);
 * - direct: the aggregated create (`POST .../sandboxes` through kube-apiserver, 201) plus an exec on that sandbox
 *   timed on its own (sandboxd `POST /v1/sandboxes/{id}/exec`): the sum is the floor the SDK path adds envd and the
 *   e2b API to. The exec is the SDK's own command, `/bin/bash -l -c 'echo hi'` (what commands.run sends), run warm
 *   (its second run in that VM: issue 31's floor) and first; and `true` (issue 18's floor).
 * Serial and at concurrency 8, interleaved in rounds. Then 64 MiB written and read back through the SDK
 * (`files.write` / `files.read`) against the agent's own file transfer to a VM of an in-process engine
 * (`AgentFiles.write` / `read`), same run.
 * Targets: SDK p50 ≤ 1.3× (create + warm exec of the same command) p50 and SDK p95 ≤ 2× its p50 (issue 31); SDK
 * file throughput ≥ 50 % of the agent's (issue 18).
 * Where the SDK's time goes: every serial SDK sample's HTTP requests are traced (undici's diagnostics channels,
 * support/undici-trace.ts) and printed per kind of request — to response headers and to the body's end — with the
 * part of the sample no request covered (the SDK's own work between requests).
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import { Sandbox } from 'e2b';
import { readClusterEnvironment } from '../src/cluster/index.js';
import { startPlatform } from '../src/cli/platform.js';
import { KubeClient, Sandboxes } from '../src/kube/index.js';
import { createLogger } from '../src/log/logger.js';
import { NodeEngine } from '../src/sandboxd/engine.js';
import { percentile } from './claim-driver.js';
import { covered, RequestTrace, type TracedRequest } from './support/undici-trace.js';

const { values } = parseArgs({
  options: {
    samples: { type: 'string', default: '20' },
    rounds: { type: 'string', default: '2' },
    warm: { type: 'string', default: '10' },
    'file-mib': { type: 'string', default: '64' },
  },
});
const SAMPLES = Number(values.samples);
const ROUNDS = Number(values.rounds);
const WARM = Number(values.warm);
const FILE_MIB = Number(values['file-mib']);
/** What the SDK side runs first (issue 31's target names it). */
const SDK_COMMAND = 'echo hi';
const say = (s: string) => process.stderr.write(`[bench/e2b] ${s}\n`);
const stats = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return { p50: percentile(s, 50), p95: percentile(s, 95), n: s.length };
};
const fmt = (s: ReturnType<typeof stats>) => `p50 ${s.p50.toFixed(1)}  p95 ${s.p95.toFixed(1)} ms (n=${s.n})`;

async function main(): Promise<void> {
  const env = readClusterEnvironment();
  const dataDir = await mkdtemp(join(tmpdir(), 'bench-e2b-'));
  say('starting the aggregated platform (1 sandboxd node, sandbox/base)');
  const platform = await startPlatform({
    cacheDir: env.cacheDir,
    binDir: env.binDir,
    dataDir,
    layout: 'aggregated',
    simulatedNodes: 0,
    sandboxdNodes: 1,
    warm: WARM,
    template: 'sandbox/base',
    etcdFsync: true,
    logger: createLogger({ level: 'warn', name: 'bench' }),
    progress: say,
  });
  const engineDir = await mkdtemp(join(tmpdir(), 'bench-e2b-agent-'));
  let engine: NodeEngine | undefined;
  try {
    const e2b = platform.e2b!;
    const node = platform.sandboxd[0]!;
    const nodeToken = (await readFile(node.tokenFile, 'utf8')).trim();
    const opts = { apiUrl: e2b.apiUrl, sandboxUrl: e2b.sandboxUrl, apiKey: e2b.apiKey, requestTimeoutMs: 60_000 };
    const kube = await KubeClient.fromKubeconfig(platform.cluster.kubeconfigPath, { qps: -1 });
    await platform.cluster.kubectl(['create', 'namespace', 'bench-e2b']);

    const waitWarm = async () => {
      for (;;) {
        const r = await fetch(`http://${node.address}/v1/info`, { headers: { authorization: `Bearer ${nodeToken}` } });
        const info = (await r.json()) as {
          pools: Array<{ key: { template: string }; primed: number; target: number }>;
        };
        const p = info.pools.find((x) => x.key.template === 'sandbox/base');
        if (p && p.primed >= p.target) return;
        await sleep(250);
      }
    };
    const trace = new RequestTrace();
    const traces: Array<{ requests: TracedRequest[]; startMs: number; endMs: number }> = [];
    const sdkOnce = async () => {
      const s = await Sandbox.create('base', opts);
      const r = await s.commands.run(SDK_COMMAND);
      if (r.stdout !== 'hi\n') throw new Error(`commands.run: ${JSON.stringify(r)}`);
      return s;
    };
    const sdkSample = async () => {
      const t0 = performance.now();
      const s = await sdkOnce();
      const ms = performance.now() - t0;
      await s.kill();
      return ms;
    };
    /** A serial sample with its requests traced (the trace is one sample's: only serial samples use it). */
    const sdkTraced = async () => {
      const { value: s, requests, startMs, endMs } = await trace.record(sdkOnce);
      traces.push({ requests, startMs, endMs });
      await s.kill();
      return endMs - startMs;
    };
    let seq = 0;
    /** Serial direct samples' parts, per argv: where the floor's own time goes. */
    const directParts = new Map<string, { create: number[]; exec: number[] }>();
    /**
     * The aggregated create, then one exec of `argv` through sandboxd. `true` is issue 18's floor; the SDK's
     * commands.run('echo hi') runs `/bin/bash -l -c 'echo hi'` (a login shell: bash and its profile in the guest), so
     * the same-work floor runs that argv. `warm`: the timed exec is the second one of the same argv in that VM
     * (issue 31's floor: a warm exec), the first untimed.
     */
    const directSample = async (argv: string[], parts?: { create: number[]; exec: number[] }, warm = false) => {
      const name = `b${seq++}-${Date.now().toString(36)}`;
      const t0 = performance.now();
      const obj = (await kube.create(Sandboxes, {
        apiVersion: 'agents.x-k8s.io/v1beta1',
        kind: 'Sandbox',
        metadata: { name, namespace: 'bench-e2b' },
        spec: { podTemplate: { spec: { containers: [{ name: 'main', image: 'sandbox/base' }] } } },
      })) as unknown as { metadata: { annotations: Record<string, string> } };
      const createMs = performance.now() - t0;
      const claim = obj.metadata.annotations['sandbox.cocoonstack.io/claim-id']!;
      const exec = async () => {
        const r = await fetch(`http://${node.address}/v1/sandboxes/${claim}/exec`, {
          method: 'POST',
          headers: { authorization: `Bearer ${nodeToken}`, 'content-type': 'application/json' },
          body: JSON.stringify({ argv }),
        });
        if (r.status !== 200) throw new Error(`exec: ${r.status} ${await r.text()}`);
        await r.arrayBuffer();
      };
      if (warm) await exec();
      const t1 = performance.now();
      await exec();
      const execMs = performance.now() - t1;
      await kube.delete(Sandboxes, 'bench-e2b', name);
      parts?.create.push(createMs);
      parts?.exec.push(execMs);
      return createMs + execMs;
    };
    const run = async (f: () => Promise<number>, n: number, conc: number) => {
      const out: number[] = [];
      let next = 0;
      await Promise.all(
        Array.from({ length: conc }, async () => {
          while (next < n) {
            next++;
            out.push(await f());
          }
        }),
      );
      return out;
    };
    await waitWarm();
    // One of each untimed: first-use costs (connections, code paths) are not what is measured.
    await sdkSample();
    const SDK_ARGV = ['/bin/bash', '-l', '-c', SDK_COMMAND];
    const partsOf = (argv: string[]) => {
      const k = argv.join(' ');
      if (!directParts.has(k)) directParts.set(k, { create: [], exec: [] });
      return directParts.get(k)!;
    };
    await directSample(['true']);
    await directSample(SDK_ARGV);
    const res = {
      sdk1: [] as number[],
      dir1: [] as number[],
      same1: [] as number[],
      warm1: [] as number[],
      sdk8: [] as number[],
      dir8: [] as number[],
    };
    for (let round = 0; round < ROUNDS; round++) {
      const per = Math.ceil(SAMPLES / ROUNDS);
      for (const [key, f, conc] of [
        ['sdk1', sdkTraced, 1],
        ['dir1', () => directSample(['true'], partsOf(['true'])), 1],
        ['same1', () => directSample(SDK_ARGV, partsOf(SDK_ARGV)), 1],
        ['warm1', () => directSample(SDK_ARGV, undefined, true), 1],
        ['sdk8', sdkSample, 8],
        ['dir8', () => directSample(['true']), 8],
      ] as const) {
        await waitWarm();
        const batch = conc === 1 ? per : Math.min(per, WARM);
        res[key].push(...(await run(f, batch, conc)));
      }
      say(`round ${round + 1}/${ROUNDS} done`);
    }
    const s = {
      sdk1: stats(res.sdk1),
      dir1: stats(res.dir1),
      same1: stats(res.same1),
      warm1: stats(res.warm1),
      sdk8: stats(res.sdk8),
      dir8: stats(res.dir8),
    };

    // Files: the SDK through router and envd, against the agent's own transfer on an in-process engine's VM.
    const blob = Buffer.alloc(FILE_MIB << 20);
    for (let i = 0; i < blob.length; i += 4) blob.writeUInt32LE((i * 2654435761) >>> 0, i);
    await waitWarm();
    const sbx = await Sandbox.create('base', { ...opts, timeoutMs: 600_000 });
    const ab = blob.buffer.slice(blob.byteOffset, blob.byteOffset + blob.length);
    let t = performance.now();
    await sbx.files.write('/tmp/big', ab);
    const sdkWrite = performance.now() - t;
    t = performance.now();
    const back = Buffer.from(await sbx.files.read('/tmp/big', { format: 'bytes' }));
    const sdkRead = performance.now() - t;
    if (!back.equals(blob)) throw new Error('SDK read back different bytes');
    await sbx.kill();
    engine = new NodeEngine({ dataDir: engineDir, nodeName: 'bench-agent', advertiseAddr: '127.0.0.1:1' });
    await engine.start();
    const rec = await engine.claim({ key: { template: 'sandbox/base', net: 'none', size: 'small' }, ttlSeconds: 600 });
    const agent = engine.vm(rec.id).agent;
    t = performance.now();
    await agent.files.write('/tmp/big', blob, { timeoutMs: 0 });
    const rawWrite = performance.now() - t;
    t = performance.now();
    const rawBack = await agent.files.read('/tmp/big', { maxBytes: blob.length, timeoutMs: 0 });
    const rawRead = performance.now() - t;
    if (!rawBack.equals(blob)) throw new Error('agent read back different bytes');
    const mibs = (ms: number) => FILE_MIB / (ms / 1000);
    trace.close();
    const kinds = new Map<string, { headers: number[]; end: number[]; n: number }>();
    const gaps: number[] = [];
    for (const t of traces) {
      for (const r of t.requests) {
        let k = kinds.get(r.label);
        if (!k) kinds.set(r.label, (k = { headers: [], end: [], n: 0 }));
        k.n++;
        if (r.headersMs !== undefined) k.headers.push(r.headersMs - r.startMs);
        if (r.endMs !== undefined) k.end.push(r.endMs - r.startMs);
      }
      const spans = t.requests.map((r) => [r.startMs, r.endMs ?? r.headersMs ?? t.endMs] as [number, number]);
      gaps.push(t.endMs - t.startMs - covered(spans, t.startMs, t.endMs));
    }
    const p50 = (xs: number[]) => (xs.length ? stats(xs).p50.toFixed(1) : '-');
    const breakdown = [
      `where a serial SDK sample's time goes (${traces.length} samples; per kind of request, p50 ms):`,
      ...[...kinds].map(
        ([label, k]) =>
          `  ${label.padEnd(48)} ${(k.n / traces.length).toFixed(1)}/sample  to headers ${p50(k.headers)}  to end ${p50(k.end)}`,
      ),
      `  no request in flight (the SDK's own work between requests)   ${p50(gaps)}`,
      ...[...directParts].map(
        ([argv, p]) =>
          `  direct, serial, exec of ${argv}: aggregated create ${p50(p.create)}, sandboxd exec ${p50(p.exec)}`,
      ),
    ];

    const lines = [
      `e2b SDK create → first commands.run('${SDK_COMMAND}') vs aggregated create + exec (1 node, sandbox/base, TCG)`,
      `  serial   SDK    ${fmt(s.sdk1)}   p95/p50 ${(s.sdk1.p95 / s.sdk1.p50).toFixed(2)} (target ≤ 2)`,
      `  serial   direct, warm exec of the SDK's command (${SDK_ARGV.join(' ')}, its 2nd run in the VM) ${fmt(s.warm1)}   ratio p50 ${(s.sdk1.p50 / s.warm1.p50).toFixed(2)} (target ≤ 1.3)`,
      `  serial   direct, first exec of the SDK's command ${fmt(s.same1)}   ratio p50 ${(s.sdk1.p50 / s.same1.p50).toFixed(2)}`,
      `  serial   direct, first exec of true ${fmt(s.dir1)}   ratio p50 ${(s.sdk1.p50 / s.dir1.p50).toFixed(2)}`,
      `  conc 8   SDK    ${fmt(s.sdk8)}`,
      `  conc 8   direct ${fmt(s.dir8)}   ratio p50 ${(s.sdk8.p50 / s.dir8.p50).toFixed(2)}`,
      `files, ${FILE_MIB} MiB: SDK write ${mibs(sdkWrite).toFixed(1)} MiB/s, read ${mibs(sdkRead).toFixed(1)} MiB/s; agent write ${mibs(rawWrite).toFixed(1)} MiB/s, read ${mibs(rawRead).toFixed(1)} MiB/s`,
      `  SDK/agent: write ${((rawWrite / sdkWrite) * 100).toFixed(0)} %, read ${((rawRead / sdkRead) * 100).toFixed(0)} % (target ≥ 50 %)`,
      ...breakdown,
    ];
    process.stdout.write(`${lines.join('\n')}\n`);
    kube.close();
  } finally {
    await engine?.close({ destroyVms: true });
    await platform.stop();
    await rm(engineDir, { recursive: true, force: true });
    await rm(dataDir, { recursive: true, force: true });
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    process.stderr.write(`bench/e2b failed: ${String((err as Error).stack ?? err)}\n`);
    process.exit(1);
  },
);
