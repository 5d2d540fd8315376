import { Command, Option } from 'commander';
import { SandboxError } from '../errors.js';

/**
 * sandbox-operator flags: the upstream operator's names and defaults, so manifests written for the
 * upstream controller work unchanged. The only place the operator reads its configuration.
 */
export const RUNTIMES = ['standard', 'vk-cocoon', 'sandboxd'] as const;
export type RuntimeName = (typeof RUNTIMES)[number];

export interface OperatorConfig {
  readonly kubeconfig: string | undefined;
  /** Watch only this namespace (all when undefined). Tests run one operator per namespace. */
  readonly watchNamespace: string | undefined;
  readonly defaultRuntime: RuntimeName;
  readonly extensions: boolean;
  readonly clusterDomain: string;
  /** No lifecycle Events on Sandboxes (SandboxPodCreated, SandboxReady, ...: docs/operator.md "Events"). */
  readonly disableSandboxEvents: boolean;
  readonly sandboxWorkers: number;
  readonly claimWorkers: number;
  readonly warmPoolWorkers: number;
  readonly templateWorkers: number;
  readonly warmPoolMaxBatchSize: number;
  readonly enableWarmPoolEviction: boolean;
  readonly warmPoolDisableCrManagement: boolean;
  readonly warmPoolReadinessGraceMs: number;
  readonly warmPoolMaxRefillRate: number;
  readonly kubeApiQps: number;
  readonly kubeApiBurst: number;
  readonly leaderElect: boolean;
  readonly leaderElectionNamespace: string;
  readonly leaderElectionId: string;
  readonly metricsBindAddress: string;
  readonly healthProbeBindAddress: string;
  readonly webhookPort: number;
  /** Empty: the host of webhookUrl, else all interfaces. */
  readonly webhookHost: string;
  readonly webhookMaxBodyBytes: number;
  readonly webhookCertDir: string;
  readonly webhookServiceName: string;
  readonly webhookNamespace: string;
  /** When set, CRD conversion clientConfig uses this URL instead of the Service (local clusters). */
  readonly webhookUrl: string | undefined;
  readonly manageWebhookCerts: boolean;
  readonly enableWebhook: boolean;
  readonly logLevel: string;
}

const bool = (v: string) => {
  if (v === 'true' || v === '1') return true;
  if (v === 'false' || v === '0') return false;
  throw new SandboxError('operator.flags', `expected true or false, got "${v}"`);
};
const int = (v: string) => {
  const n = Number(v);
  if (!Number.isFinite(n)) throw new SandboxError('operator.flags', `expected a number, got "${v}"`);
  return Math.trunc(n);
};
const duration = (v: string) => {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)$/.exec(v);
  if (!m) throw new SandboxError('operator.flags', `expected a duration like 30s or 5m, got "${v}"`);
  return Number(m[1]) * { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[m[2] as 'ms' | 's' | 'm' | 'h'];
};

export function operatorCommand(): Command {
  const b = (name: string, def: boolean, help: string) =>
    new Option(`--${name} [bool]`, help).default(def).argParser(bool);
  return new Command('sandbox-operator')
    .description('Controllers for the agent-sandbox API (Sandbox, SandboxTemplate, SandboxWarmPool, SandboxClaim)')
    .option('--kubeconfig <path>', 'kubeconfig (default: in-cluster or $KUBECONFIG)')
    .option('--namespace <ns>', 'watch only this namespace (default: all namespaces)')
    .option(
      '--default-runtime <runtime>',
      'runtime for Sandboxes that name none: standard | vk-cocoon | sandboxd',
      'standard',
    )
    .addOption(b('extensions', true, 'run the SandboxTemplate/SandboxWarmPool/SandboxClaim controllers'))
    .option('--cluster-domain <domain>', 'cluster DNS domain (Service FQDNs, cert SANs)', 'cluster.local')
    .addOption(b('disable-sandbox-events', false, 'record no lifecycle Events on Sandboxes'))
    .option('--sandbox-concurrent-workers <n>', 'Sandbox reconcile workers', int, 16)
    .option('--sandbox-claim-concurrent-workers <n>', 'SandboxClaim reconcile workers', int, 50)
    .option('--sandbox-warm-pool-concurrent-workers <n>', 'SandboxWarmPool reconcile workers', int, 8)
    .option('--sandbox-template-concurrent-workers <n>', 'SandboxTemplate reconcile workers', int, 1)
    .option('--sandbox-warm-pool-max-batch-size <n>', 'max Sandboxes a pool creates or deletes per pass', int, 300)
    .addOption(b('enable-warm-pool-eviction', true, 'mark warm pods safe-to-evict'))
    .addOption(b('sandbox-warm-pool-disable-cr-management', false, 'status-only warm pools (L3 mode)'))
    .option(
      '--sandbox-warm-pool-readiness-grace-period <d>',
      'grace before an unready warm member is replaced',
      duration,
      300_000,
    )
    .option('--sandbox-warm-pool-max-refill-rate <n>', 'warm Sandboxes created per second (0 = unpaced)', Number, 0)
    .option('--kube-api-qps <n>', 'client QPS (negative disables limiting)', Number, 200)
    .option('--kube-api-burst <n>', 'client burst', int, 400)
    .addOption(b('leader-elect', true, 'elect a leader on a Lease before running controllers'))
    .option('--leader-election-namespace <ns>', 'namespace of the leader Lease (default: the webhook namespace)', '')
    .option('--leader-election-id <id>', 'leader Lease name', 'sandbox-operator.agents.x-k8s.io')
    .option('--metrics-bind-address <addr>', 'Prometheus /metrics address ("0" disables)', ':8080')
    .option('--health-probe-bind-address <addr>', '/healthz and /readyz address ("0" disables)', ':8081')
    .option('--webhook-port <port>', 'conversion webhook HTTPS port', int, 9443)
    .option(
      '--webhook-host <host>',
      'conversion webhook listen address (default: the host of --webhook-url, else all interfaces)',
      '',
    )
    .option('--webhook-max-body-bytes <n>', 'largest ConversionReview the webhook accepts', int, 32 * 1024 * 1024)
    .option('--webhook-cert-dir <dir>', 'serving certificate directory', '/tmp/k8s-webhook-server/serving-certs')
    .option('--webhook-service-name <name>', 'conversion webhook Service', 'sandbox-webhook-service')
    .option(
      '--webhook-namespace <ns>',
      'namespace of the webhook Service and cert Secret (also the router namespace)',
      'sandbox-system',
    )
    .option('--webhook-url <url>', 'reach the conversion webhook at this URL instead of the Service (local clusters)')
    .addOption(b('manage-webhook-certs', true, 'create/load the webhook serving cert and patch CRD caBundles'))
    .addOption(b('enable-webhook', true, 'serve the conversion webhook'))
    .option('--zap-log-level <level>', 'log level (debug, info, warn, error)', 'info')
    .option('--version', 'print the version and exit');
}

export function toConfig(opts: Record<string, unknown>): OperatorConfig {
  const errors: string[] = [];
  const runtime = String(opts.defaultRuntime);
  if (!(RUNTIMES as readonly string[]).includes(runtime)) errors.push(`unsupported default runtime "${runtime}"`);
  const positive = (flag: string, v: unknown) => {
    if (typeof v !== 'number' || v <= 0) errors.push(`--${flag} must be > 0 (got ${String(v)})`);
  };
  positive('sandbox-concurrent-workers', opts.sandboxConcurrentWorkers);
  positive('sandbox-claim-concurrent-workers', opts.sandboxClaimConcurrentWorkers);
  positive('sandbox-warm-pool-concurrent-workers', opts.sandboxWarmPoolConcurrentWorkers);
  positive('sandbox-template-concurrent-workers', opts.sandboxTemplateConcurrentWorkers);
  positive('sandbox-warm-pool-max-batch-size', opts.sandboxWarmPoolMaxBatchSize);
  positive('kube-api-burst', opts.kubeApiBurst);
  positive('webhook-max-body-bytes', opts.webhookMaxBodyBytes);
  if (errors.length)
    throw new SandboxError('operator.flags', errors.join('; '), { hint: 'see sandbox-operator --help' });
  const webhookNamespace = String(opts.webhookNamespace);
  return {
    kubeconfig: opts.kubeconfig as string | undefined,
    watchNamespace: (opts.namespace as string | undefined) || undefined,
    defaultRuntime: runtime as RuntimeName,
    extensions: opts.extensions as boolean,
    clusterDomain: String(opts.clusterDomain),
    disableSandboxEvents: opts.disableSandboxEvents as boolean,
    sandboxWorkers: opts.sandboxConcurrentWorkers as number,
    claimWorkers: opts.sandboxClaimConcurrentWorkers as number,
    warmPoolWorkers: opts.sandboxWarmPoolConcurrentWorkers as number,
    templateWorkers: opts.sandboxTemplateConcurrentWorkers as number,
    warmPoolMaxBatchSize: opts.sandboxWarmPoolMaxBatchSize as number,
    enableWarmPoolEviction: opts.enableWarmPoolEviction as boolean,
    warmPoolDisableCrManagement: opts.sandboxWarmPoolDisableCrManagement as boolean,
    warmPoolReadinessGraceMs: opts.sandboxWarmPoolReadinessGracePeriod as number,
    warmPoolMaxRefillRate: opts.sandboxWarmPoolMaxRefillRate as number,
    kubeApiQps: opts.kubeApiQps as number,
    kubeApiBurst: opts.kubeApiBurst as number,
    leaderElect: opts.leaderElect as boolean,
    leaderElectionNamespace: String(opts.leaderElectionNamespace) || webhookNamespace,
    leaderElectionId: String(opts.leaderElectionId),
    metricsBindAddress: String(opts.metricsBindAddress),
    healthProbeBindAddress: String(opts.healthProbeBindAddress),
    webhookPort: opts.webhookPort as number,
    webhookHost: String(opts.webhookHost),
    webhookMaxBodyBytes: opts.webhookMaxBodyBytes as number,
    webhookCertDir: String(opts.webhookCertDir),
    webhookServiceName: String(opts.webhookServiceName),
    webhookNamespace,
    webhookUrl: opts.webhookUrl as string | undefined,
    manageWebhookCerts: opts.manageWebhookCerts as boolean,
    enableWebhook: opts.enableWebhook as boolean,
    logLevel: String(opts.zapLogLevel),
  };
}

/** Defaults as a config object, for tests and for embedding the operator in-process (sbx up). */
export function defaultConfig(overrides: Partial<OperatorConfig> = {}): OperatorConfig {
  const cmd = operatorCommand();
  cmd.parse([], { from: 'user' });
  return { ...toConfig(cmd.opts()), ...overrides };
}
