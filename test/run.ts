/**
 * The test command (`npm test`): one real control plane for the whole run, then node's test runner over every
 * test file (each file in its own process, all sharing the cluster; one namespace per test), then a check that
 * nothing the run started is still running.
 *
 * A file named `*.alone.test.ts` stops or partitions something the other files share (a node of the aggregated
 * platform, say), or loads the machine enough to upset other tests' timing (the chart installed on real nodes): it
 * runs after all the others, one file at a time, so no other file's test sees the fault.
 *
 *   node --import tsx test/run.ts [files or directories...]
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { cp, readdir, readFile, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  cgroupsWithPrefix,
  isAlive,
  listClusterNamespaces,
  listProcesses,
  readClusterEnvironment,
  startCluster,
} from '../src/cluster/index.js';
import { errorMessage } from '../src/errors.js';
import { namespacesOfRun } from '../src/vmm/net/index.js';
import { resolveDriverOptions } from '../src/vmm/options.js';
import { installCrds } from './support/crds.js';
import { AGGREGATED_ENV, startAggregatedForTests } from './support/aggregated.js';

const RUN_MARKER = 'SBX_TEST_RUN_ID';
/** Files that fault a shared component: run after the others, one at a time (see the header). */
const ALONE_SUFFIX = '.alone.test.ts';

/** node's test runner over `files`; its exit code. */
function runTests(files: string[], concurrency: string, env: NodeJS.ProcessEnv): Promise<number> {
  return new Promise<number>((resolve) => {
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', '--test', '--test-reporter=spec', `--test-concurrency=${concurrency}`, ...files],
      { stdio: 'inherit', env },
    );
    child.on('exit', (c, sig) => resolve(c ?? (sig ? 1 : 0)));
  });
}

async function collect(paths: string[]): Promise<string[]> {
  const out: string[] = [];
  for (const p of paths) {
    const s = await stat(p);
    if (s.isDirectory()) {
      const entries = await readdir(p, { recursive: true });
      out.push(...entries.filter((e) => e.endsWith('.test.ts')).map((e) => join(p, e)));
    } else out.push(p);
  }
  return out.sort();
}

/** Every process whose environment carries this run's marker: the run's own descendants (QEMU VMs included: src/vmm
 * passes the marker to QEMU), orphaned or not. */
async function processesOfRun(runId: string): Promise<Array<{ pid: number; cmd: string }>> {
  const procs = await listProcesses({ environ: true });
  return procs.filter((p) => p.pid !== process.pid && p.environ?.includes(`${RUN_MARKER}=${runId}`));
}

/**
 * A failed run keeps what its components logged (kube-apiserver, sandboxd, sandbox-apiserver, ...; the data dir
 * itself goes with the cluster), so a failure that happens only under a full run's load can be read afterwards.
 */
async function keepLogs(dataDir: string, runId: string): Promise<void> {
  const dest = join(tmpdir(), `sbx-test-logs-${runId.slice(0, 8)}`);
  try {
    const logs = (await readdir(dataDir, { recursive: true })).filter((f) => f.endsWith('.log'));
    for (const f of logs) await cp(join(dataDir, f), join(dest, f));
    process.stderr.write(`the run failed: ${logs.length} component logs are kept in ${dest}\n`);
  } catch (err) {
    process.stderr.write(`keeping the logs of the failed run failed: ${errorMessage(err)}\n`);
  }
}

async function main(): Promise<number> {
  const args = process.argv.slice(2);
  const files = (await collect(args.length ? args : ['test'])).map((f) => relative(process.cwd(), f));
  const runId = randomUUID();
  process.env[RUN_MARKER] = runId; // inherited by the cluster processes and the test processes
  const env = readClusterEnvironment();

  process.stderr.write(`starting the shared control plane for ${files.length} test files...\n`);
  const t0 = Date.now();
  let cluster: Awaited<ReturnType<typeof startCluster>> | undefined;
  // The aggregated layout needs a control plane of its own (its APIService would shadow the Sandbox CRD the
  // other tests use); started only when a test of it is selected.
  let aggregated: Awaited<ReturnType<typeof startAggregatedForTests>> | undefined;
  let code = 1;
  // Everything after startCluster (CRDs, the info file, the tests) inside the try: a failed CRD install still tears
  // the cluster down. startCluster itself cleans up what it started when it fails.
  try {
    cluster = await startCluster({
      cacheDir: env.cacheDir,
      binDir: env.binDir,
      simulatedNodes: 2,
      // One real node (kubelet + containerd) for the tests of the standard runtime; tainted, so every other test's
      // Pods stay on the simulated nodes.
      realNodes: 1,
      realNodeTaint: true,
      progress: (l) => process.stderr.write(`${l}\n`),
    });
    process.stderr.write(
      `control plane Ready in ${(cluster.readyMs / 1000).toFixed(2)} s (kube-apiserver /readyz; ${((Date.now() - t0) / 1000).toFixed(2)} s with controllers and simulated nodes)\n`,
    );
    await installCrds(cluster.kubectl);
    const infoPath = join(cluster.dataDir, 'test-cluster.json');
    const { kubectl: _k, processes: _p, stop: _s, ...info } = cluster;
    await writeFile(infoPath, JSON.stringify(info));
    const testEnv: Record<string, string> = { SBX_TEST_CLUSTER: infoPath };
    if (files.some((f) => f.includes('test/aggregated/'))) {
      process.stderr.write('starting the aggregated-layout control plane (sandbox-apiserver, 2 sandboxd nodes)...\n');
      aggregated = await startAggregatedForTests(join(cluster.dataDir, 'aggregated'));
      testEnv[AGGREGATED_ENV] = join(cluster.dataDir, 'aggregated.json');
      await writeFile(testEnv[AGGREGATED_ENV], JSON.stringify(aggregated.info));
    }
    const alone = files.filter((f) => f.endsWith(ALONE_SUFFIX));
    const shared = files.filter((f) => !f.endsWith(ALONE_SUFFIX));
    const runEnv = { ...process.env, ...testEnv };
    const sharedCode = shared.length ? await runTests(shared, process.env.SBX_TEST_CONCURRENCY ?? '2', runEnv) : 0;
    if (alone.length) process.stderr.write(`running ${alone.length} test files that run alone...\n`);
    const aloneCode = alone.length ? await runTests(alone, '1', runEnv) : 0;
    code = sharedCode || aloneCode;
  } catch (err) {
    process.stderr.write(`test run failed before the tests: ${errorMessage(err)}\n`);
  } finally {
    await aggregated?.stop();
    if (code !== 0 && cluster) await keepLogs(cluster.dataDir, runId);
    await cluster?.stop();
  }

  // Nothing this run started may outlive it.
  await sleep(200);
  const leftovers = await processesOfRun(runId);
  const clusterAlive = [...(cluster?.pids ?? []), ...(aggregated?.pids() ?? [])].filter(isAlive);
  // Only this run's namespaces: other work on the machine may create its own meanwhile.
  const ours = [cluster?.netns, aggregated?.info.cluster.netns];
  const netnsLeft = [
    ...(await listClusterNamespaces()).filter((n) => ours.includes(n)),
    // Networked VMs' namespaces (src/vmm/net): their slot files carry the run marker.
    ...namespacesOfRun(resolveDriverOptions().vmNetworkSlotDir, runId),
  ];
  // Real nodes' cgroup subtrees (`<netns>-<node>`): their containers do not carry the run marker, their cgroups do
  // hold them.
  const cgroupsLeft = cluster ? await cgroupsWithPrefix(`${cluster.netns}-`) : [];
  // Their mounts (overlay roots, volumes, pod namespaces) live in the nodes' own mount namespaces; one seen here
  // would have escaped into the machine's.
  const mountsLeft = cluster
    ? (await readFile('/proc/self/mountinfo', 'utf8')).split('\n').filter((l) => l.includes(cluster!.dataDir))
    : [];
  cgroupsLeft.push(...mountsLeft.map((l) => `mount ${l.split(' ')[4]}`));
  if (leftovers.length || clusterAlive.length || netnsLeft.length || cgroupsLeft.length) {
    process.stderr.write(
      `leak check FAILED: ${leftovers.length} processes still running${leftovers.map((p) => `\n  ${p.pid} ${p.cmd.slice(0, 160)}`).join('')}` +
        `${netnsLeft.length ? `\n  network namespaces left: ${netnsLeft.join(', ')}` : ''}` +
        `${cgroupsLeft.length ? `\n  cgroups / mounts left: ${cgroupsLeft.join(', ')}` : ''}\n`,
    );
    for (const p of leftovers) if (isAlive(p.pid)) process.kill(p.pid, 'SIGKILL');
    return 1;
  }
  process.stderr.write(
    `leak check passed: every process started by the run has exited, no network namespace or node cgroup left\n`,
  );
  return code;
}

main().then(
  (code) => process.exit(code),
  (err) => {
    process.stderr.write(`test run failed before the tests: ${errorMessage(err)}\n`);
    process.exit(1);
  },
);
