import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { request } from 'node:http';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { applyCrdDir, issueCert, startCluster, type ClusterHandle } from '../cluster/index.js';
import { SandboxError } from '../errors.js';
import { freePort } from '../net/free-port.js';
import { defaultRunRoot } from '../sandboxd/engine.js';
import type { Logger } from '../log/logger.js';

/**
 * The local platform that `sbx up` runs, in one composition root: the control plane with simulated standard nodes,
 * the generated CRDs, sandbox-operator (conversion webhook reachable by the apiserver at the cluster's host
 * address) and N sandboxd nodes (real microVMs, each registering virtual-kubelet nodes).
 */
export interface PlatformOptions {
  cacheDir: string;
  binDir: string | undefined;
  dataDir: string;
  simulatedNodes: number;
  sandboxdNodes: number;
  /** Warm VMs each sandboxd keeps of the base template, so the first claim is fast. */
  warm: number;
  etcdFsync: boolean;
  logger: Logger;
  progress: (line: string) => void;
}

export interface ComponentProcess {
  name: string;
  pid: number;
  logPath: string;
}

export interface Platform {
  cluster: ClusterHandle;
  components: ComponentProcess[];
  sandboxd: Array<{ node: string; address: string; tokenFile: string; vmRunRoot: string }>;
  operatorHealth: string;
  pids(): number[];
  stop(): Promise<void>;
}

const REPO = fileURLToPath(new URL('../../', import.meta.url));
const bin = (name: string) => join(REPO, 'bin', `${name}.mjs`);

async function waitHttp(
  url: string,
  child: ChildProcess,
  name: string,
  logPath: string,
  timeoutMs: number,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) {
      const tail = (await readFile(logPath, 'utf8').catch(() => '')).trimEnd().split('\n').slice(-10).join('\n');
      throw new SandboxError(
        'platform.component-died',
        `${name} exited (${child.exitCode ?? child.signalCode}). Last log lines:\n${tail}`,
        {
          hint: `see ${logPath}`,
        },
      );
    }
    const ok = await new Promise<boolean>((resolve) => {
      const req = request(url, { timeout: 1000 }, (res) => {
        res.resume();
        resolve(res.statusCode === 200);
      });
      req.on('error', () => resolve(false));
      req.on('timeout', () => req.destroy());
      req.end();
    });
    if (ok) return;
    await sleep(200);
  }
  throw new SandboxError('platform.not-ready', `${name} not ready after ${timeoutMs} ms`, { hint: `see ${logPath}` });
}

export async function startPlatform(opts: PlatformOptions): Promise<Platform> {
  await rm(opts.dataDir, { recursive: true, force: true });
  await mkdir(opts.dataDir, { recursive: true });
  const cluster = await startCluster({
    cacheDir: opts.cacheDir,
    binDir: opts.binDir,
    dataDir: join(opts.dataDir, 'cluster'),
    simulatedNodes: opts.simulatedNodes,
    etcdFsync: opts.etcdFsync,
    logger: opts.logger,
    progress: opts.progress,
  });
  const children: Array<{ name: string; child: ChildProcess; logPath: string }> = [];
  const stop = async () => {
    for (const { child } of [...children].reverse()) {
      if (child.exitCode !== null || child.signalCode !== null) continue;
      child.kill('SIGTERM');
      const exited = await Promise.race([
        new Promise((r) => child.once('exit', r)).then(() => true),
        sleep(20_000).then(() => false),
      ]);
      if (!exited) child.kill('SIGKILL');
    }
    await cluster.stop();
  };
  const launch = (name: string, script: string, args: string[]) => {
    const logPath = join(opts.dataDir, `${name}.log`);
    const log = createWriteStream(logPath);
    const child = spawn(process.execPath, [bin(script), ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout?.pipe(log);
    child.stderr?.pipe(log);
    children.push({ name, child, logPath });
    return { child, logPath };
  };

  try {
    opts.progress('installing the agent-sandbox CRDs');
    await applyCrdDir(cluster.kubectl, join(REPO, 'deploy', 'crds'));
    await cluster.kubectl(['create', 'namespace', 'sandbox-system']);

    const host = cluster.hostAddress;
    const webhookPort = await freePort(host);
    const healthPort = await freePort();
    const metricsPort = await freePort();
    opts.progress('starting sandbox-operator');
    const op = launch('sandbox-operator', 'sandbox-operator', [
      `--kubeconfig=${cluster.kubeconfigPath}`,
      `--webhook-host=${host}`,
      `--webhook-port=${webhookPort}`,
      `--webhook-url=https://${host}:${webhookPort}/convert`,
      `--webhook-cert-dir=${join(opts.dataDir, 'webhook-certs')}`,
      `--metrics-bind-address=127.0.0.1:${metricsPort}`,
      `--health-probe-bind-address=127.0.0.1:${healthPort}`,
      `--cluster-domain=${cluster.clusterDomain}`,
    ]);
    const operatorHealth = `http://127.0.0.1:${healthPort}`;

    const tokenFile = join(opts.dataDir, 'sandboxd.token');
    await writeFile(tokenFile, randomBytes(24).toString('base64url'), { mode: 0o600 });
    const sandboxd: Platform['sandboxd'] = [];
    const waits: Array<Promise<void>> = [
      waitHttp(`${operatorHealth}/readyz`, op.child, 'sandbox-operator', op.logPath, 120_000),
    ];
    for (let i = 0; i < opts.sandboxdNodes; i++) {
      const node = `node-${i}`;
      const dir = join(opts.dataDir, node);
      await mkdir(dir, { recursive: true });
      const kubelet = await issueCert(dir, cluster.pki.ca, {
        name: 'kubelet',
        commonName: `system:node:${node}`,
        ips: [host],
        usage: 'server',
      });
      const port = await freePort(host);
      opts.progress(
        `starting sandboxd ${node} (microVM templates are built on first use; the first start takes minutes)`,
      );
      const d = launch(`sandboxd-${node}`, 'sandboxd', [
        `--node-name=${node}`,
        `--listen=${host}:${port}`,
        `--data-dir=${join(dir, 'data')}`,
        `--token-file=${tokenFile}`,
        `--kubeconfig=${cluster.kubeconfigPath}`,
        `--kubelet-address=${host}`,
        `--kubelet-port=${10250 + i * 10}`,
        `--kubelet-tls-cert=${kubelet.cert}`,
        `--kubelet-tls-key=${kubelet.key}`,
        `--kubelet-client-ca=${cluster.pki.ca.cert}`,
        ...(opts.warm > 0 ? [`--pools=sandbox/base=${opts.warm}`] : []),
        '--destroy-on-exit',
      ]);
      sandboxd.push({ node, address: `${host}:${port}`, tokenFile, vmRunRoot: defaultRunRoot(join(dir, 'data')) });
      waits.push(waitHttp(`http://${host}:${port}/healthz`, d.child, `sandboxd ${node}`, d.logPath, 30 * 60_000));
    }
    await Promise.all(waits);
    return {
      cluster,
      sandboxd,
      operatorHealth,
      components: children.map((c) => ({ name: c.name, pid: c.child.pid ?? -1, logPath: c.logPath })),
      pids: () => [...cluster.processes().map((p) => p.pid), ...children.map((c) => c.child.pid ?? -1)],
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}

/** What a detached platform leaves behind so `sbx down` can stop exactly what it started. */
export interface PlatformState {
  status: 'starting' | 'ready' | 'failed';
  supervisorPid: number;
  error?: string;
  kubeconfigPath?: string;
  binDir?: string;
  netns?: string;
  hostInterface?: string;
  pids?: number[];
  /** sandboxd VM run roots: `sbx down` kills any QEMU left under them (if sandboxd itself was killed). */
  vmRunRoots?: string[];
  readyMs?: number;
}

export function statePath(stateDir: string): string {
  return join(stateDir, 'platform', 'state.json');
}

export async function readState(stateDir: string): Promise<PlatformState | undefined> {
  try {
    return JSON.parse(await readFile(statePath(stateDir), 'utf8')) as PlatformState;
  } catch {
    return undefined;
  }
}

export async function writeState(stateDir: string, state: PlatformState): Promise<void> {
  await mkdir(join(stateDir, 'platform'), { recursive: true });
  const tmp = `${statePath(stateDir)}.tmp`;
  await writeFile(tmp, JSON.stringify(state, null, 2));
  await rename(tmp, statePath(stateDir));
}
