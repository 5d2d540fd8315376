import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { Command, Option } from 'commander';
import { SandboxError } from '../errors.js';
import { DEFAULT_VM_NETWORK_CIDR, SIM_CLONE_MS } from '../vmm/index.js';
import {
  DEFAULT_CHECKPOINT_TTL_HOURS,
  DEFAULT_MAX_CHECKPOINTS,
  DEFAULT_MAX_CHECKPOINTS_PER_NAMESPACE,
  DEFAULT_MAX_SUSPENDED,
} from './engine.js';
import { DEFAULT_CHECKPOINT_REPLICAS } from './placement/replicate.js';
import { DEFAULT_IDLE_CPU_PERCENT } from './idle.js';
import { NETS, parsePoolKey, SIZES, type PoolKey } from './pool-key.js';

/** sandboxd flags; the only place sandboxd reads its configuration (and the environment). */
export interface SandboxdConfig {
  readonly nodeName: string;
  readonly listenHost: string;
  readonly listenPort: number;
  /** The claim gateway's address (POST /v1/claim only, without node:http); undefined = not started. */
  readonly claimListen: { host: string; port: number } | undefined;
  /** Whether the claim gateway takes Kubernetes bearer tokens (needs --claim-listen and --kubeconfig). */
  readonly gatewayIdentity: 'kubernetes' | 'none';
  readonly gatewayAuthCacheTtlMs: number;
  readonly gatewayAuthStaleMs: number;
  readonly gatewayAdoptionIntervalMs: number;
  readonly advertiseAddr: string;
  /** The data plane (envd for e2b SDKs, src/sandboxd/envd): where it listens, and the address routers use. */
  readonly envdListen: { host: string; port: number } | undefined;
  readonly envdAdvertiseAddr: string | undefined;
  readonly envdMaxUploadBytes: number;
  readonly envdMaxConnections: number;
  /** Whether --advertise-addr was given (else a `--listen` port of 0 is replaced by the bound one). */
  readonly advertiseExplicit: boolean;
  readonly dataDir: string;
  /** Sync the claim table to disk before a claim is answered (false: a claim survives sandboxd's crash only). */
  readonly fsync: boolean;
  readonly rootToken: string | undefined;
  readonly tenants: ReadonlyMap<string, string>;
  readonly allowAnonymous: boolean;
  /** `sim`: a simulated VMM (src/vmm/sim-driver.ts), for fleet-scale benchmarks; no VM runs. */
  readonly engine: 'qemu' | 'sim';
  /** How long a simulated clone takes (engine sim only). */
  readonly simCloneMs: number | undefined;
  readonly maxClaims: number;
  readonly maxSuspended: number;
  readonly idleCpuPercent: number;
  /** Cap in MiB on a filesystem pause's saved files (0: the sandbox's memory size); files-pause.ts. */
  readonly maxLayerMib: number;
  readonly refillConcurrency: number;
  readonly refillDelayMs: number;
  readonly spareVmms: number;
  readonly vmNetworkCidr: string;
  readonly vmResolver: string | undefined;
  readonly primeWarmVms: boolean;
  readonly defaultTtlSeconds: number;
  readonly pauseMode: 'memory' | 'hibernate';
  readonly peers: readonly string[];
  /** Checkpoint placement (docs/placement.md). */
  readonly checkpointPeerHeal: boolean;
  readonly checkpointTtlHours: number;
  readonly maxCheckpoints: number;
  readonly maxCheckpointsPerNamespace: number;
  readonly checkpointHealConcurrency: number;
  readonly checkpointHealTimeoutMs: number;
  readonly checkpointMaxBytes: number;
  /** How many nodes should hold each checkpoint (docs/placement.md "Replicas"); 1: only where it was taken. */
  readonly checkpointReplicas: number;
  readonly checkpointReplicaIntervalMs: number;
  readonly pools: ReadonlyArray<{ key: PoolKey; warm: number }>;
  readonly kubeconfig: string | undefined;
  readonly publishInventory: boolean;
  readonly publishIntervalMs: number;
  readonly vkNodes: ReadonlyArray<'vk-cocoon' | 'sandboxd'>;
  readonly kubeletAddress: string | undefined;
  readonly kubeletPort: number;
  readonly kubeletTlsCert: string | undefined;
  readonly kubeletTlsKey: string | undefined;
  readonly kubeletClientCa: string | undefined;
  readonly destroyOnExit: boolean;
  readonly logLevel: string;
}

export function sandboxdCommand(): Command {
  const bool = (v: string) => v !== 'false' && v !== '0';
  return new Command('sandboxd')
    .description('Node daemon: microVM warm pools, node-local claims, NodeInventory, virtual-kubelet nodes')
    .option('--node-name <name>', "this node's name", hostname())
    .option('--listen <host:port>', 'HTTP API address', '127.0.0.1:7777')
    .option(
      '--claim-listen <host:port>',
      'also serve POST /v1/claim on this address through the lean claim gateway (docs/sandboxd.md); off by default',
    )
    .addOption(
      new Option(
        '--gateway-identity <kind>',
        'with --kubeconfig: the claim gateway also takes Kubernetes bearer tokens, authorized by RBAC (create sandboxclaims) and recorded as SandboxClaims (docs/claim-gateway.md)',
      )
        .choices(['kubernetes', 'none'])
        .default('kubernetes'),
    )
    .option(
      '--gateway-auth-cache-ttl <seconds>',
      'how long a TokenReview or SubjectAccessReview verdict is used',
      Number,
      10,
    )
    .option(
      '--gateway-auth-stale <seconds>',
      'how much longer an expired verdict is used while kube-apiserver does not answer (0: never)',
      Number,
      60,
    )
    .option(
      '--gateway-adoption-interval <seconds>',
      'how often gateway deliveries are checked against their SandboxClaims (unrecorded: recorded; claim gone: released)',
      Number,
      10,
    )
    .option('--advertise-addr <host:port>', 'address peers and the control plane use for this node (default: --listen)')
    .option(
      '--envd-listen <host:port>',
      'serve the data plane (envd, for e2b SDKs through the e2b router; docs/e2b.md) on this address; off by default',
    )
    .option(
      '--envd-advertise-addr <host:port>',
      'address the e2b router uses for the data plane (default: --envd-listen)',
    )
    .option('--envd-max-upload-bytes <n>', 'largest file upload through envd /files, per file', String(1 << 30))
    .option(
      '--envd-max-connections <n>',
      'client connections open at once on the data plane (past it new ones are closed at once)',
      '4096',
    )
    .option('--data-dir <dir>', 'state and VM run dirs', join('/var/lib', 'sandboxd'))
    .addOption(
      new Option(
        '--fsync [bool]',
        'answer a claim once it is synced to disk (false: once written to the kernel: it survives a crash of sandboxd, not a power loss)',
      )
        .default(true)
        .argParser(bool),
    )
    .option('--token-file <path>', 'file holding the root (operator) API token')
    .option('--tenant-tokens-file <path>', 'file of `<tenant> <token>` lines')
    .addOption(
      new Option(
        '--allow-anonymous [bool]',
        'serve the API without any token when none is configured (never in production; no effect with tokens)',
      )
        .default(false)
        .argParser(bool),
    )
    .addOption(
      new Option(
        '--engine <kind>',
        'VMM: real QEMU microVMs, or a SIMULATION (records, no VM; for fleet-scale benchmarks only)',
      )
        .choices(['qemu', 'sim'])
        .default('qemu'),
    )
    .option(
      '--sim-clone-ms <ms>',
      `how long a simulated clone takes (--engine=sim; default ${SIM_CLONE_MS}, the real clone time measured here)`,
      Number,
    )
    .option(
      '--max-claims <n>',
      'running claimed sandboxes at most (then 429); hibernated ones do not count',
      Number,
      200,
    )
    .option(
      '--max-suspended <n>',
      'hibernated sandboxes kept besides the running ones (they hold disk, not RAM): claims beyond --max-claims plus this get 429',
      Number,
      DEFAULT_MAX_SUSPENDED,
    )
    .option(
      '--idle-cpu-percent <n>',
      "guest CPU (% of one host core) above which a sandbox with an idle policy counts as busy (docs/sandboxd.md 'Idle suspend')",
      Number,
      DEFAULT_IDLE_CPU_PERCENT,
    )
    .option(
      '--max-layer-mib <n>',
      "a filesystem pause's saved files at most, in MiB (then 413 and the sandbox runs on); 0: the sandbox's memory size",
      Number,
      0,
    )
    .option(
      '--vm-network-cidr <cidr>',
      "networked VMs: where each VM's veth /30 to the node comes from (must not overlap the node's networks)",
      DEFAULT_VM_NETWORK_CIDR,
    )
    .option(
      '--vm-resolver <ip>',
      "networked VMs: the DNS server guests' 10.0.2.3 is forwarded to (default: the node's first non-loopback nameserver)",
    )
    .option('--refill-concurrency <n>', 'clones made in parallel while refilling', Number, 2)
    .option('--refill-delay <ms>', 'wait after a claim before refilling the pool', Number, 25)
    .option(
      '--spare-vmms <n>',
      'QEMU processes kept per template with its state loaded and the guest paused, so a clone skips start-up',
      Number,
      1,
    )
    .addOption(
      new Option(
        '--prime-warm-vms [bool]',
        'run one command in each warm VM before handing it out (under TCG it pays the first exec, ~0.2 s, ahead)',
      )
        .default(true)
        .argParser(bool),
    )
    .addOption(
      new Option(
        '--pause-mode <mode>',
        'what pause does: freeze the VM in memory (~2 ms each way) or hibernate it to disk (frees its RAM)',
      )
        .choices(['memory', 'hibernate'])
        .default('memory'),
    )
    .option('--default-ttl-seconds <n>', 'lease of a claim that asks for none', Number, 300)
    .option(
      '--peers <list>',
      'comma-separated peer sandboxd addresses (with --kubeconfig, peers are also learned from NodeInventory)',
      '',
    )
    .addOption(
      new Option(
        '--checkpoint-peer-heal [bool]',
        'a checkpoint claim that misses here pulls the checkpoint from an owner once and serves it locally (needs --token-file and --checkpoint-ttl-hours)',
      )
        .default(false)
        .argParser(bool),
    )
    .option(
      '--checkpoint-ttl-hours <n>',
      'delete checkpoints (snapshots) this many hours after they were taken (0: never); paused and hibernated sandboxes are not checkpoints: their lease ends them',
      Number,
      DEFAULT_CHECKPOINT_TTL_HOURS,
    )
    .option('--checkpoint-heal-concurrency <n>', 'checkpoint pulls at once (beyond: 503 with Retry-After)', Number, 2)
    .option('--checkpoint-heal-timeout <seconds>', 'time budget of one heal, over all owners tried', Number, 1800)
    .option(
      '--max-checkpoints <n>',
      'most checkpoints this node keeps: taking one beyond is 429 (pulled copies count, and are kept; 0: no limit)',
      Number,
      DEFAULT_MAX_CHECKPOINTS,
    )
    .option(
      '--max-checkpoints-per-namespace <n>',
      "most checkpoints of one namespace (or one tenant's) on this node: taking one beyond is 403 (0: no limit)",
      Number,
      DEFAULT_MAX_CHECKPOINTS_PER_NAMESPACE,
    )
    .option('--checkpoint-max-gib <n>', "most GiB a pulled checkpoint's files may declare together", Number, 64)
    .option(
      '--checkpoint-replicas <n>',
      `nodes that keep a copy of each checkpoint, copied in the background (1: only the node that took it; needs --token-file and --checkpoint-ttl-hours > 0; default ${DEFAULT_CHECKPOINT_REPLICAS} when those are set, else 1)`,
    )
    .option(
      '--checkpoint-replica-interval <seconds>',
      'how often the copies of every checkpoint held here are counted again (a node that went away is noticed then)',
      Number,
      30,
    )
    .option('--pools <list>', 'initial warm targets: template[:net[:size]]=N, comma separated', '')
    .option('--kubeconfig <path>', 'enables NodeInventory publishing and virtual-kubelet nodes')
    .addOption(
      new Option('--publish-inventory [bool]', 'publish NodeInventory (needs --kubeconfig)')
        .default(true)
        .argParser(bool),
    )
    .option('--publish-interval <seconds>', 'NodeInventory cadence', Number, 30)
    .option(
      '--vk-nodes <list>',
      'virtual-kubelet nodes to register: vk-cocoon,sandboxd ("" for none)',
      'vk-cocoon,sandboxd',
    )
    .option('--kubelet-address <ip>', 'address the apiserver reaches the kubelet API at (Node InternalIP)')
    .option('--kubelet-port <port>', 'first kubelet API port (one per virtual node)', Number, 10250)
    .option(
      '--kubelet-tls-cert <path>',
      'kubelet serving certificate (default: a self-signed one for --kubelet-address, as the kubelet makes)',
    )
    .option('--kubelet-tls-key <path>', 'kubelet serving key (with --kubelet-tls-cert)')
    .option('--kubelet-client-ca <path>', "CA that signs the apiserver's kubelet client certificate")
    .addOption(
      new Option('--destroy-on-exit [bool]', 'destroy every VM when stopping (default: VMs survive restarts)')
        .default(false)
        .argParser(bool),
    )
    .option('--log-level <level>', 'log level', 'info');
}

function parsePools(spec: string): Array<{ key: PoolKey; warm: number }> {
  if (!spec.trim()) return [];
  return spec.split(',').map((item) => {
    const m = /^([^=]+)=(\d+)$/.exec(item.trim());
    if (!m) throw new SandboxError('sandboxd.flags', `--pools: "${item}" is not template[:net[:size]]=N`);
    const [template, ...axes] = m[1]!.split(':');
    const net = axes.find((a) => (NETS as readonly string[]).includes(a));
    const size = axes.find((a) => (SIZES as readonly string[]).includes(a));
    const unknown = axes.filter((a) => a !== net && a !== size);
    if (unknown.length)
      throw new SandboxError('sandboxd.flags', `--pools: unknown axis "${unknown.join(':')}" in "${item}"`);
    return { key: parsePoolKey({ template, net, size }), warm: Number(m[2]) };
  });
}

/** A listen flag's `host:port`: the host defaults to 127.0.0.1, the port to `defaultPort` (without one it is required). */
function listenAddress(
  flag: string,
  value: string,
  errors: string[],
  defaultPort?: number,
): { host: string; port: number } | undefined {
  const [host = '127.0.0.1', port = defaultPort === undefined ? '' : String(defaultPort)] = value.split(/:(?=\d+$)/);
  if (/^\d+$/.test(port) && Number(port) <= 65535) return { host, port: Number(port) };
  errors.push(`${flag}: bad port "${port}" (want host:port)`);
  return undefined;
}

export function toSandboxdConfig(o: Record<string, unknown>): SandboxdConfig {
  const errors: string[] = [];
  const listen = listenAddress('--listen', String(o.listen), errors, 7777);
  const claimListen =
    o.claimListen === undefined ? undefined : listenAddress('--claim-listen', String(o.claimListen), errors);
  const envdListen =
    o.envdListen === undefined || o.envdListen === ''
      ? undefined
      : listenAddress('--envd-listen', String(o.envdListen), errors);
  const envdMaxUploadBytes = Number(o.envdMaxUploadBytes);
  if (!Number.isInteger(envdMaxUploadBytes) || envdMaxUploadBytes < 1)
    errors.push(`--envd-max-upload-bytes: "${String(o.envdMaxUploadBytes)}" is not a positive integer`);
  const envdMaxConnections = Number(o.envdMaxConnections);
  if (!Number.isInteger(envdMaxConnections) || envdMaxConnections < 1)
    errors.push(`--envd-max-connections: "${String(o.envdMaxConnections)}" is not a positive integer`);
  const rootToken = o.tokenFile ? readFileSync(String(o.tokenFile), 'utf8').trim() : undefined;
  const tenants = new Map<string, string>();
  if (o.tenantTokensFile) {
    for (const line of readFileSync(String(o.tenantTokensFile), 'utf8').split('\n')) {
      const [name, token] = line.trim().split(/\s+/);
      if (name && token) tenants.set(token, name);
    }
  }
  for (const flag of ['gatewayAuthCacheTtl', 'gatewayAuthStale', 'gatewayAdoptionInterval'] as const) {
    const v = Number(o[flag]);
    if (!Number.isFinite(v) || v < 0 || (flag !== 'gatewayAuthStale' && v === 0))
      errors.push(`--${flag.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}: must be a positive number of seconds`);
  }
  if (!rootToken && tenants.size === 0 && !o.allowAnonymous)
    errors.push('no API token configured: pass --token-file (or --allow-anonymous for a throwaway local daemon)');
  const vkNodes = String(o.vkNodes)
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  for (const n of vkNodes)
    if (n !== 'vk-cocoon' && n !== 'sandboxd') errors.push(`--vk-nodes: unknown node kind "${n}"`);
  let pools: Array<{ key: PoolKey; warm: number }> = [];
  try {
    pools = parsePools(String(o.pools));
  } catch (err) {
    errors.push((err as Error).message);
  }
  const engine = o.engine === 'sim' ? 'sim' : 'qemu';
  if (o.simCloneMs !== undefined && engine !== 'sim') errors.push('--sim-clone-ms: only with --engine=sim');
  if (o.simCloneMs !== undefined && !(Number(o.simCloneMs) >= 0))
    errors.push(`--sim-clone-ms: must be a number >= 0 (got ${String(o.simCloneMs)})`);
  const heal = Boolean(o.checkpointPeerHeal);
  const ttlHours = Number(o.checkpointTtlHours);
  const maxCheckpoints = Number(o.maxCheckpoints);
  const maxCheckpointsPerNamespace = Number(o.maxCheckpointsPerNamespace);
  for (const [flag, v] of [
    ['--max-checkpoints', maxCheckpoints],
    ['--max-checkpoints-per-namespace', maxCheckpointsPerNamespace],
    ['--max-layer-mib', Number(o.maxLayerMib)],
  ] as const)
    if (!(Number.isInteger(v) && v >= 0)) errors.push(`${flag}: must be an integer >= 0 (got ${String(v)})`);
  if (!(ttlHours >= 0)) errors.push(`--checkpoint-ttl-hours: must be >= 0 (got ${String(o.checkpointTtlHours)})`);
  for (const [flag, v] of [
    ['--checkpoint-heal-concurrency', o.checkpointHealConcurrency],
    ['--checkpoint-heal-timeout', o.checkpointHealTimeout],
    ['--checkpoint-max-gib', o.checkpointMaxGib],
  ] as const)
    if (!(Number(v) > 0)) errors.push(`${flag}: must be a positive number (got ${String(v)})`);
  // As the reference requires: peers authenticate pulls with the fleet token, and a delete that an offline peer
  // missed must age out there, or heal would bring the checkpoint back to every node that claims it.
  if (heal && !rootToken) errors.push('--checkpoint-peer-heal needs --token-file (peers pull with the fleet token)');
  if (heal && !(ttlHours > 0))
    errors.push('--checkpoint-peer-heal needs --checkpoint-ttl-hours > 0 (a delete a peer missed ages out there)');
  // Replication pulls with the fleet token, and, as heal, needs deletes a down peer missed to age out there: without
  // a TTL, a copy on a node that was down during a delete would be copied back to the fleet.
  const replicasGiven = o.checkpointReplicas !== undefined;
  const replicas = replicasGiven
    ? Number(o.checkpointReplicas)
    : rootToken && ttlHours > 0
      ? DEFAULT_CHECKPOINT_REPLICAS
      : 1;
  if (!(Number.isInteger(replicas) && replicas >= 1))
    errors.push(`--checkpoint-replicas: must be an integer >= 1 (got ${String(o.checkpointReplicas)})`);
  if (replicas > 1 && !rootToken)
    errors.push('--checkpoint-replicas > 1 needs --token-file (peers pull copies with the fleet token)');
  if (replicas > 1 && !(ttlHours > 0))
    errors.push('--checkpoint-replicas > 1 needs --checkpoint-ttl-hours > 0 (a delete a peer missed ages out there)');
  if (!(Number(o.checkpointReplicaInterval) > 0))
    errors.push(
      `--checkpoint-replica-interval: must be a positive number (got ${String(o.checkpointReplicaInterval)})`,
    );
  for (const [flag, v, max] of [
    ['--max-suspended', o.maxSuspended, 1_000_000],
    ['--idle-cpu-percent', o.idleCpuPercent, 100],
  ] as const)
    if (!Number.isFinite(Number(v)) || Number(v) < 0 || Number(v) > max)
      errors.push(`${flag}: must be a number from 0 to ${max} (got ${String(v)})`);
  if (errors.length || !listen)
    throw new SandboxError('sandboxd.flags', errors.join('; '), { hint: 'see sandboxd --help' });
  const { host: listenHost, port: listenPort } = listen;
  const advertiseExplicit = typeof o.advertiseAddr === 'string';
  const advertiseAddr = advertiseExplicit ? String(o.advertiseAddr) : `${listenHost}:${listenPort}`;
  return {
    nodeName: String(o.nodeName),
    listenHost,
    listenPort,
    claimListen,
    gatewayIdentity: o.gatewayIdentity === 'none' ? 'none' : 'kubernetes',
    gatewayAuthCacheTtlMs: Number(o.gatewayAuthCacheTtl) * 1000,
    gatewayAuthStaleMs: Number(o.gatewayAuthStale) * 1000,
    gatewayAdoptionIntervalMs: Number(o.gatewayAdoptionInterval) * 1000,
    advertiseAddr,
    envdListen,
    envdAdvertiseAddr:
      (o.envdAdvertiseAddr as string | undefined) ?? (envdListen ? `${envdListen.host}:${envdListen.port}` : undefined),
    envdMaxUploadBytes,
    envdMaxConnections,
    advertiseExplicit,
    dataDir: String(o.dataDir),
    rootToken,
    tenants,
    allowAnonymous: Boolean(o.allowAnonymous),
    engine,
    simCloneMs: o.simCloneMs === undefined ? undefined : Number(o.simCloneMs),
    maxClaims: Number(o.maxClaims),
    maxSuspended: Number(o.maxSuspended),
    idleCpuPercent: Number(o.idleCpuPercent),
    maxLayerMib: Number(o.maxLayerMib),
    refillConcurrency: Number(o.refillConcurrency),
    refillDelayMs: Number(o.refillDelay),
    spareVmms: Number(o.spareVmms),
    vmNetworkCidr: String(o.vmNetworkCidr),
    vmResolver: o.vmResolver === undefined ? undefined : String(o.vmResolver),
    primeWarmVms: o.primeWarmVms as boolean,
    defaultTtlSeconds: Number(o.defaultTtlSeconds),
    pauseMode: o.pauseMode === 'hibernate' ? 'hibernate' : 'memory',
    peers: String(o.peers)
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean),
    checkpointPeerHeal: heal,
    checkpointTtlHours: ttlHours,
    maxCheckpoints,
    maxCheckpointsPerNamespace,
    checkpointHealConcurrency: Number(o.checkpointHealConcurrency),
    checkpointHealTimeoutMs: Number(o.checkpointHealTimeout) * 1000,
    checkpointMaxBytes: Number(o.checkpointMaxGib) * 2 ** 30,
    checkpointReplicas: replicas,
    checkpointReplicaIntervalMs: Number(o.checkpointReplicaInterval) * 1000,
    pools,
    kubeconfig: o.kubeconfig as string | undefined,
    publishInventory: Boolean(o.publishInventory),
    publishIntervalMs: Number(o.publishInterval) * 1000,
    vkNodes: vkNodes as Array<'vk-cocoon' | 'sandboxd'>,
    kubeletAddress: o.kubeletAddress as string | undefined,
    kubeletPort: Number(o.kubeletPort),
    kubeletTlsCert: o.kubeletTlsCert as string | undefined,
    kubeletTlsKey: o.kubeletTlsKey as string | undefined,
    kubeletClientCa: o.kubeletClientCa as string | undefined,
    destroyOnExit: Boolean(o.destroyOnExit),
    fsync: o.fsync !== false,
    logLevel: String(o.logLevel),
  };
}
