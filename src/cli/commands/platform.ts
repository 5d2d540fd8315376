import { spawn } from 'node:child_process';
import { openSync } from 'node:fs';
import { mkdir, readFile, rm } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { Option, type Command } from 'commander';
import {
  deleteClusterNetwork,
  isAlive,
  listClusterNamespaces,
  listProcesses,
  readClusterEnvironment,
  removeRealNodeCgroups,
} from '../../cluster/index.js';
import { SandboxError, errorMessage } from '../../errors.js';
import { createLogger } from '../../log/logger.js';
import { parseApiKeys } from '../../apiserver/e2b/api-keys.js';
import {
  readState,
  startPlatform,
  statePath,
  writeState,
  type Layout,
  type Platform,
  type PlatformState,
} from '../platform.js';

export interface UpOptions {
  detach?: boolean;
  layout: string;
  supervise?: boolean;
  nodes: string;
  warm: string;
  simulatedNodes: string;
  realNodes: string;
  fsync: boolean;
  logLevel: string;
  checkpointPeerHeal?: string | boolean;
}

const SBX_BIN = fileURLToPath(new URL('../../../bin/sbx.mjs', import.meta.url));

export function register(program: Command): void {
  program
    .command('up')
    .description('start the local platform: control plane, operator, sandboxd nodes with microVMs (Ctrl-C stops it)')
    .option('-d, --detach', 'return once everything is Ready; the last line printed is an export for eval')
    .addOption(
      new Option(
        '--layout <layout>',
        'crd: Sandboxes are CRs (any runtime); aggregated: served by sandbox-apiserver from the nodes',
      )
        .choices(['crd', 'aggregated'])
        .default('crd'),
    )
    .option(
      '--nodes <n>',
      'sandboxd nodes (real microVMs; in the CRD layout each registers virtual-kubelet nodes)',
      '1',
    )
    .option('--warm <n>', 'warm sandbox/base microVMs each sandboxd keeps ready', '2')
    .option(
      '--simulated-nodes <n>',
      'simulated (kwok) standard nodes: no container runs there (scale experiments)',
      '0',
    )
    .option(
      '--real-nodes <n>',
      'real worker nodes (kubelet + containerd, in the cluster namespace): standard-runtime Sandboxes run real containers',
      '1',
    )
    .option(
      '--no-fsync',
      'run etcd and sandboxd without fsync (faster; what they answered for survives a crash of one of them, not of the machine; figures measured so are labelled)',
    )
    .option(
      '--checkpoint-peer-heal [nodes]',
      'sandboxd nodes that pull a checkpoint they lack from a peer (comma-separated names such as node-2; no value: all); the others redirect to an owner',
    )
    .option('--log-level <level>', 'log level', 'info')
    .addOption(new Option('--supervise', 'internal: run as the detached supervisor').hideHelp())
    .action(async (opts: UpOptions) => {
      if (opts.detach) await upDetached(opts);
      else await upForeground(opts);
    });

  program
    .command('down')
    .description('stop a detached platform and everything it started')
    .option('--all', 'also remove stale sbx-* network namespaces left by killed runs')
    .action(async (opts: { all?: boolean }) => down(opts));

  program
    .command('status')
    .description('show whether a detached platform is running')
    .action(async () => {
      const env = readClusterEnvironment();
      const state = await readState(env.stateDir);
      if (!state || !isAlive(state.supervisorPid)) {
        process.stdout.write('no platform running\n');
        process.exitCode = 1;
        return;
      }
      process.stdout.write(
        `${state.status}: ${state.layout ?? 'crd'} layout, kubeconfig ${state.kubeconfigPath ?? '(pending)'}, pid ${state.supervisorPid}\n`,
      );
    });
}

export function platformOptions(opts: UpOptions) {
  const env = readClusterEnvironment();
  const logger = createLogger({ level: opts.logLevel, name: 'sbx' });
  const int = (flag: string, v: string, max: number) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < 0 || n > max)
      throw new SandboxError('cli.usage', `--${flag} must be an integer 0..${max}, got "${v}"`);
    return n;
  };
  const nodes = int('simulated-nodes', opts.simulatedNodes, 100);
  const realNodes = int('real-nodes', opts.realNodes, 8);
  const sandboxdNodes = int('nodes', opts.nodes, 16);
  const warm = int('warm', opts.warm, 200);
  const names = Array.from({ length: sandboxdNodes }, (_, i) => `node-${i}`);
  const heal =
    opts.checkpointPeerHeal === undefined || opts.checkpointPeerHeal === false
      ? []
      : opts.checkpointPeerHeal === true
        ? names
        : opts.checkpointPeerHeal.split(',').map((s) => s.trim());
  for (const n of heal)
    if (!names.includes(n))
      throw new SandboxError(
        'cli.usage',
        `--checkpoint-peer-heal: no sandboxd node "${n}" (nodes: ${names.join(', ')})`,
      );
  return {
    env,
    logger,
    options: {
      cacheDir: env.cacheDir,
      binDir: env.binDir,
      dataDir: join(env.stateDir, 'platform', 'data'),
      layout: opts.layout as Layout,
      simulatedNodes: nodes,
      realNodes,
      sandboxdNodes,
      warm,
      // The e2b API's pools (docs/e2b.md "Template alias table"): as many warm VMs on the lane its SDKs ask for.
      ...(opts.layout === 'aggregated' ? { e2bWarm: warm } : {}),
      checkpointPeerHeal: heal,
      etcdFsync: opts.fsync,
      logger,
      progress: (line: string) => process.stderr.write(`${line}\n`),
    },
  };
}

async function refuseIfRunning(stateDir: string) {
  const state = await readState(stateDir);
  if (state && isAlive(state.supervisorPid) && state.supervisorPid !== process.pid) {
    throw new SandboxError('cli.already-running', `a platform is already running (pid ${state.supervisorPid})`, {
      hint: 'run `sbx down` first',
    });
  }
}

async function upForeground(opts: UpOptions): Promise<void> {
  const { env, options } = platformOptions(opts);
  if (!opts.supervise) await refuseIfRunning(env.stateDir);
  let platform: Platform | undefined;
  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    process.stderr.write(`\n${signal}: stopping the platform...\n`);
    await platform?.stop();
    await rm(statePath(env.stateDir), { force: true });
    process.stderr.write('stopped.\n');
    process.exit(0);
  };
  process.on('SIGINT', () => void stop('SIGINT'));
  process.on('SIGTERM', () => void stop('SIGTERM'));
  await writeState(env.stateDir, { status: 'starting', supervisorPid: process.pid });
  try {
    platform = await startPlatform(options);
  } catch (err) {
    await writeState(env.stateDir, { status: 'failed', supervisorPid: process.pid, error: errorMessage(err) });
    throw err;
  }
  const c = platform.cluster;
  await writeState(env.stateDir, {
    status: 'ready',
    layout: platform.layout,
    supervisorPid: process.pid,
    kubeconfigPath: c.kubeconfigPath,
    binDir: c.binDir,
    pluginDir: platform.pluginDir,
    netns: c.netns,
    hostInterface: c.hostInterface,
    pids: platform.pids(),
    vmRunRoots: platform.sandboxd.map((d) => d.vmRunRoot),
    readyMs: c.readyMs,
    ...(platform.e2b
      ? {
          e2b: {
            apiUrl: platform.e2b.apiUrl,
            sandboxUrl: platform.e2b.sandboxUrl,
            apiKeyFile: platform.e2b.apiKeyFile,
            domain: platform.e2b.domain,
          },
        }
      : {}),
  });
  if (stopping) return;
  const kubectl = `KUBECONFIG=${c.kubeconfigPath} PATH=${platform.pluginDir}:$PATH ${join(c.binDir, 'kubectl')}`;
  process.stdout.write(
    [
      `sandbox-operator platform is up (control plane Ready in ${(c.readyMs / 1000).toFixed(1)} s)`,
      `  kubeconfig:   ${c.kubeconfigPath}`,
      `  apiserver:    ${c.server}`,
      ...(c.realNodes.length
        ? [`  real nodes:   ${c.realNodes.join(', ')} (kubelet + containerd; cluster DNS ${c.clusterDns ?? '-'})`]
        : []),
      ...(c.simulatedNodes.length
        ? [`  nodes:        ${c.simulatedNodes.join(', ')} (standard runtime, simulated by kwok)`]
        : []),
      `  layout:       ${platform.layout}${platform.apiserver ? ` (sandboxes served by sandbox-apiserver at https://${platform.apiserver.address}; APIService Available in ${(platform.apiserver.apiServiceAvailableMs / 1000).toFixed(1)} s)` : ' (Sandboxes are CRs)'}`,
      ...platform.sandboxd.map(
        (d) =>
          `  sandboxd:     ${d.node} at http://${d.address} (token: ${d.tokenFile})${platform.layout === 'crd' ? `; microVM nodes ${d.node}-vk, ${d.node}-sandboxd` : ''}${d.peerHeal ? '; heals checkpoints from peers' : ''}`,
      ),
      ...(platform.e2b
        ? [
            `  e2b API:      ${platform.e2b.apiUrl} (sandboxes in namespace ${platform.e2b.namespace}; key in ${platform.e2b.apiKeyFile})`,
            `  e2b sandbox:  ${platform.e2b.sandboxUrl} (E2B_SANDBOX_URL)`,
            `  e2b getHost:  ${getHostHint(platform.e2b.domain)}`,
            `  e2b SDK:      E2B_API_URL=${platform.e2b.apiUrl} E2B_SANDBOX_URL=${platform.e2b.sandboxUrl} E2B_API_KEY=${platform.e2b.apiKey}`,
          ]
        : []),
      ...platform.components.map((p) => `  ${(p.name + ':').padEnd(13)} pid ${p.pid}, log ${p.logPath}`),
      `  try:          ${kubectl} get nodes`,
      platform.layout === 'crd'
        ? `                ${kubectl} apply -f examples/warm-pool.yaml`
        : `                ${kubectl} create -f examples/aggregated/sandbox.yaml && ${kubectl} get sandboxes -o wide`,
      opts.supervise ? '' : '  Press Ctrl-C to stop.',
      '',
    ].join('\n'),
  );
  await new Promise(() => {}); // run until a signal
}

async function upDetached(opts: UpOptions): Promise<void> {
  const { env } = platformOptions(opts);
  await refuseIfRunning(env.stateDir);
  await mkdir(join(env.stateDir, 'platform'), { recursive: true });
  await rm(statePath(env.stateDir), { force: true });
  const logPath = join(env.stateDir, 'platform', 'supervisor.log');
  const out = openSync(logPath, 'w');
  const args = [
    SBX_BIN,
    'up',
    '--supervise',
    '--layout',
    opts.layout,
    '--nodes',
    opts.nodes,
    '--warm',
    opts.warm,
    '--simulated-nodes',
    opts.simulatedNodes,
    '--real-nodes',
    opts.realNodes,
    '--log-level',
    opts.logLevel,
  ];
  if (!opts.fsync) args.push('--no-fsync');
  if (opts.checkpointPeerHeal === true) args.push('--checkpoint-peer-heal');
  else if (typeof opts.checkpointPeerHeal === 'string') args.push(`--checkpoint-peer-heal=${opts.checkpointPeerHeal}`);
  const child = spawn(process.execPath, args, { detached: true, stdio: ['ignore', out, out] });
  child.unref();
  process.stderr.write(`starting the platform in the background (pid ${child.pid}, log ${logPath})\n`);
  for (;;) {
    await sleep(250);
    const state = await readState(env.stateDir);
    if (state?.status === 'ready' && state.kubeconfigPath && state.binDir) {
      process.stderr.write(`platform ready; stop it with \`sbx down\`\n`);
      if (state.e2b?.domain) process.stderr.write(`e2b getHost: ${getHostHint(state.e2b.domain)}\n`);
      process.stdout.write(`${await exportLine(state)}\n`);
      return;
    }
    if (state?.status === 'failed')
      throw new SandboxError('cli.up-failed', `platform failed to start: ${state.error}`, { hint: `see ${logPath}` });
    if (child.pid !== undefined && !isAlive(child.pid))
      throw new SandboxError('cli.up-failed', 'the platform supervisor exited before it was ready', {
        hint: `see ${logPath}`,
      });
  }
}

async function down(opts: { all?: boolean }): Promise<void> {
  const env = readClusterEnvironment();
  const state = await readState(env.stateDir);
  if (state) {
    if (isAlive(state.supervisorPid)) {
      process.kill(state.supervisorPid, 'SIGTERM');
      for (let i = 0; i < 120 && isAlive(state.supervisorPid); i++) await sleep(250);
      if (isAlive(state.supervisorPid)) process.kill(state.supervisorPid, 'SIGKILL');
    }
    // Whatever the supervisor could not stop (it was killed, say) goes now, by recorded PID.
    for (const pid of state.pids ?? []) if (isAlive(pid)) process.kill(pid, 'SIGKILL');
    await killVmsUnder(state.vmRunRoots ?? []);
    // Real nodes' containers are not among the recorded PIDs: they go with their nodes' cgroup subtrees.
    if (state.netns) await reportLeft(await removeRealNodeCgroups(state.netns));
    if (state.netns && state.hostInterface)
      await deleteClusterNetwork({ netns: state.netns, hostInterface: state.hostInterface });
    await rm(statePath(env.stateDir), { force: true });
    process.stderr.write('platform stopped\n');
  } else {
    process.stderr.write('no platform running\n');
  }
  if (opts.all) {
    for (const netns of await listClusterNamespaces()) {
      await reportLeft(await removeRealNodeCgroups(netns));
      await deleteClusterNetwork({ netns, hostInterface: `${netns.replace('-', '')}h` });
      process.stderr.write(`removed stale network namespace ${netns}\n`);
    }
  }
}

async function reportLeft(cgroups: string[]): Promise<void> {
  if (cgroups.length) process.stderr.write(`could not remove these cgroups (still busy?): ${cgroups.join(', ')}\n`);
}

/** QEMU processes whose command line names one of these run roots (left behind if sandboxd was killed). */
async function killVmsUnder(runRoots: string[]): Promise<void> {
  if (!runRoots.length) return;
  for (const p of await listProcesses())
    if (p.cmd.startsWith('qemu-system') && runRoots.some((r) => p.cmd.includes(`${r}/`)))
      process.kill(p.pid, 'SIGKILL');
  for (const r of runRoots) await rm(r, { recursive: true, force: true });
}

/** What `sbx up` tells e2b users about `getHost(port)` (docs/e2b.md "URLs the SDK builds"). */
export function getHostHint(domain: string): string {
  return (
    `sbx.getHost(port) is <port>-<id>.${domain}: curl and browsers reach it as http://<that host>/ (*.localhost is ` +
    `loopback); Node and Python resolve *.localhost only with nss-myhostname, else send Host: <that host> to E2B_SANDBOX_URL`
  );
}

/**
 * The line `sbx up --detach` prints last, for `eval`: KUBECONFIG, PATH (kubectl and the kubectl plugin) and, in the
 * aggregated layout, E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY (the first key of its 0600 file), so an e2b SDK
 * needs nothing else.
 */
export async function exportLine(state: PlatformState): Promise<string> {
  const path = [state.binDir, state.pluginDir].filter((d): d is string => !!d).map((d) => resolve(d));
  let line = `export KUBECONFIG=${resolve(state.kubeconfigPath ?? '')} PATH=${path.join(':')}:$PATH`;
  if (state.e2b) {
    const [key] = parseApiKeys(await readFile(state.e2b.apiKeyFile, 'utf8'));
    line += ` E2B_API_URL=${state.e2b.apiUrl} E2B_SANDBOX_URL=${state.e2b.sandboxUrl}`;
    if (key) line += ` E2B_API_KEY=${key}`;
  }
  return line;
}
