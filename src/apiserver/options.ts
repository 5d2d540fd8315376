/**
 * sandbox-apiserver's flags (metrics-server's shape: options → validate → config), the only place it reads its
 * configuration. Flag names follow k8s.io/apiserver's where they mean the same thing (`--secure-port`,
 * `--tls-cert-file`, `--authentication-token-webhook-cache-ttl`, ...), so they read familiar to operators.
 */
import { readFileSync } from 'node:fs';
import { Command, Option } from 'commander';
import { SandboxError } from '../errors.js';

export interface ApiServerConfig {
  readonly bindAddress: string;
  readonly securePort: number;
  readonly tlsCertFile: string | undefined;
  readonly tlsKeyFile: string | undefined;
  readonly certDir: string;
  readonly serviceName: string;
  readonly serviceNamespace: string;
  readonly clusterDomain: string;
  readonly tlsSans: readonly string[];
  readonly kubeconfig: string | undefined;
  readonly sandboxdToken: string | undefined;
  readonly allowAnonymous: boolean;
  readonly tokenCacheTtlMs: number;
  readonly authorizedCacheTtlMs: number;
  readonly unauthorizedCacheTtlMs: number;
  readonly nodeTimeoutMs: number;
  readonly watchCacheEvents: number;
  readonly enableWarmPoolDriver: boolean;
  readonly warmPoolSyncIntervalMs: number;
  readonly logLevel: string;
}

const seconds = (flag: string) => (v: string) => {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m)?$/.exec(v.trim());
  if (!m) throw new SandboxError('apiserver.flags', `--${flag}: "${v}" is not a duration (e.g. 10s, 500ms, 1m)`);
  const n = Number(m[1]);
  return m[2] === 'ms' ? n : m[2] === 'm' ? n * 60_000 : n * 1000;
};
const int = (flag: string, min: number) => (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < min)
    throw new SandboxError('apiserver.flags', `--${flag}: "${v}" is not an integer >= ${min}`);
  return n;
};

export function apiServerCommand(): Command {
  const bool = (v: string) => v !== 'false' && v !== '0';
  return new Command('sandbox-apiserver')
    .description('Aggregated Kubernetes API for sandboxes served from sandboxd nodes (agents.x-k8s.io/v1beta1)')
    .option('--bind-address <ip>', 'address to serve HTTPS on', '0.0.0.0')
    .option('--secure-port <port>', 'HTTPS port', int('secure-port', 0), 6443)
    .option('--tls-cert-file <path>', 'serving certificate (PEM); re-read when it changes (cert-manager)')
    .option('--tls-private-key-file <path>', 'its private key (PEM)')
    .option(
      '--cert-dir <dir>',
      'where a self-managed serving certificate and its CA (ca.crt) are kept',
      './apiserver.local.config/certificates',
    )
    .option(
      '--service-name <name>',
      'the Service the APIService names (the serving certificate covers <name>.<namespace>.svc)',
      'sandbox-apiserver',
    )
    .option('--service-namespace <ns>', "the Service's namespace", 'sandbox-system')
    .option('--cluster-domain <domain>', 'cluster DNS domain (certificate SANs)', 'cluster.local')
    .option('--tls-sans <list>', 'extra DNS names or IPs for a self-managed certificate, comma separated', '')
    .option(
      '--kubeconfig <path>',
      'kubeconfig for NodeInventory, TokenReview and SubjectAccessReview (default: in-cluster or $KUBECONFIG)',
    )
    .option('--sandboxd-token-file <path>', "file holding the fleet's sandboxd root token (whitespace trimmed)")
    .addOption(
      new Option(
        '--allow-anonymous [bool]',
        'serve requests without credentials as system:anonymous (development only)',
      )
        .default(false)
        .argParser(bool),
    )
    .option(
      '--authentication-token-webhook-cache-ttl <d>',
      'how long TokenReview answers are reused',
      seconds('authentication-token-webhook-cache-ttl'),
      10_000,
    )
    .option(
      '--authorization-webhook-cache-authorized-ttl <d>',
      'how long an allow is reused',
      seconds('authorization-webhook-cache-authorized-ttl'),
      10_000,
    )
    .option(
      '--authorization-webhook-cache-unauthorized-ttl <d>',
      'how long a deny is reused',
      seconds('authorization-webhook-cache-unauthorized-ttl'),
      10_000,
    )
    .option('--node-timeout <d>', 'bound on every call to a sandboxd node', seconds('node-timeout'), 10_000)
    .option(
      '--watch-cache-events <n>',
      'changes kept for watches to resume from (older: 410, the client relists)',
      int('watch-cache-events', 1000),
      100_000,
    )
    .addOption(
      new Option(
        '--enable-warm-pool-driver [bool]',
        'fill SandboxWarmPools on the nodes (leader-elected; one writer of their status)',
      )
        .default(true)
        .argParser(bool),
    )
    .option(
      '--warm-pool-sync-interval <d>',
      'how often the driver resyncs pools and samples warm counts',
      seconds('warm-pool-sync-interval'),
      5000,
    )
    .option('--log-level <level>', 'log level (debug, info, warn, error)', 'info');
}

interface RawOptions {
  bindAddress: string;
  securePort: number;
  tlsCertFile?: string;
  tlsPrivateKeyFile?: string;
  certDir: string;
  serviceName: string;
  serviceNamespace: string;
  clusterDomain: string;
  tlsSans: string;
  kubeconfig?: string;
  sandboxdTokenFile?: string;
  allowAnonymous: boolean;
  authenticationTokenWebhookCacheTtl: number;
  authorizationWebhookCacheAuthorizedTtl: number;
  authorizationWebhookCacheUnauthorizedTtl: number;
  nodeTimeout: number;
  watchCacheEvents: number;
  enableWarmPoolDriver: boolean;
  warmPoolSyncInterval: number;
  logLevel: string;
}

/** Validated configuration; every problem is reported at once, with what to do. */
export function toApiServerConfig(o: RawOptions): ApiServerConfig {
  const problems: string[] = [];
  if (!!o.tlsCertFile !== !!o.tlsPrivateKeyFile)
    problems.push(
      '--tls-cert-file and --tls-private-key-file go together (or omit both for a self-managed certificate)',
    );
  let token: string | undefined;
  if (o.sandboxdTokenFile) {
    try {
      token = readFileSync(o.sandboxdTokenFile, 'utf8').trim() || undefined;
      if (!token) problems.push(`--sandboxd-token-file ${o.sandboxdTokenFile} is empty`);
    } catch (err) {
      problems.push(`--sandboxd-token-file: ${(err as Error).message}`);
    }
  }
  if (problems.length)
    throw new SandboxError('apiserver.flags', problems.join('; '), { hint: 'run sandbox-apiserver --help' });
  return {
    bindAddress: o.bindAddress,
    securePort: o.securePort,
    tlsCertFile: o.tlsCertFile,
    tlsKeyFile: o.tlsPrivateKeyFile,
    certDir: o.certDir,
    serviceName: o.serviceName,
    serviceNamespace: o.serviceNamespace,
    clusterDomain: o.clusterDomain,
    tlsSans: o.tlsSans
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean),
    kubeconfig: o.kubeconfig,
    sandboxdToken: token,
    allowAnonymous: o.allowAnonymous,
    tokenCacheTtlMs: o.authenticationTokenWebhookCacheTtl,
    authorizedCacheTtlMs: o.authorizationWebhookCacheAuthorizedTtl,
    unauthorizedCacheTtlMs: o.authorizationWebhookCacheUnauthorizedTtl,
    nodeTimeoutMs: o.nodeTimeout,
    watchCacheEvents: o.watchCacheEvents,
    enableWarmPoolDriver: o.enableWarmPoolDriver,
    warmPoolSyncIntervalMs: o.warmPoolSyncInterval,
    logLevel: o.logLevel,
  };
}

/** The defaults, for code that builds a server without parsing argv (tests, `sbx up`). */
export function defaultApiServerConfig(overrides: Partial<ApiServerConfig> = {}): ApiServerConfig {
  const parsed = apiServerCommand().parse([], { from: 'user' }).opts<RawOptions>();
  return { ...toApiServerConfig(parsed), ...overrides };
}
