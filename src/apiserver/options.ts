/**
 * sandbox-apiserver's flags (metrics-server's shape: options → validate → config), the only place it reads its
 * configuration. Flag names follow k8s.io/apiserver's where they mean the same thing (`--secure-port`,
 * `--tls-cert-file`, `--authentication-token-webhook-cache-ttl`, ...), so they read familiar to operators.
 */
import { readFileSync } from 'node:fs';
import { Command, Option } from 'commander';
import { SandboxError } from '../errors.js';
import { readApiKeys } from './e2b/api-keys.js';
import { readTemplateAliases, type TemplateAlias } from './e2b/templates.js';

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
  readonly maxConnections: number;
  readonly watchCacheEvents: number;
  readonly enableWarmPoolDriver: boolean;
  readonly warmPoolSyncIntervalMs: number;
  readonly enableClaimBinder: boolean;
  /** Record no Events for the lifecycle verbs (`--disable-sandbox-events`, as sandbox-operator's flag). */
  readonly disableSandboxEvents: boolean;
  readonly logLevel: string;
  /** The e2b-compatible API (docs/e2b.md); undefined listens mean off. */
  readonly e2b: {
    readonly listen: { host: string; port: number } | undefined;
    readonly sandboxListen: { host: string; port: number } | undefined;
    /** The router's certificate and key, read at start (--e2b-sandbox-tls-*-file); absent: plain HTTP. */
    readonly sandboxTls?: { certFile: string; keyFile: string };
    readonly apiKeys: readonly string[];
    readonly allowAnonymous: boolean;
    readonly namespace: string;
    readonly domain: string | undefined;
    readonly templates: readonly TemplateAlias[];
  };
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
      '--max-connections <n>',
      'client connections open at once on the secure port (past it new ones are closed at once)',
      int('max-connections', 1),
      4096,
    )
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
    .addOption(
      new Option(
        '--enable-claim-binder [bool]',
        'bind SandboxClaims made through the Kubernetes API by node-local claims (leader-elected)',
      )
        .default(true)
        .argParser(bool),
    )
    .addOption(
      new Option(
        '--disable-sandbox-events [bool]',
        'record no Events on Sandboxes for the lifecycle verbs (SandboxPaused, SandboxForked, ...)',
      )
        .default(false)
        .argParser(bool),
    )
    .option(
      '--warm-pool-sync-interval <d>',
      'how often the driver resyncs pools and samples warm counts',
      seconds('warm-pool-sync-interval'),
      5000,
    )
    .option('--log-level <level>', 'log level (debug, info, warn, error)', 'info')
    .option('--e2b-listen <host:port>', 'serve the e2b-compatible control plane (E2B_API_URL) here; off by default')
    .option(
      '--e2b-sandbox-listen <host:port>',
      "serve the e2b data plane's entry point (E2B_SANDBOX_URL, <port>-<id>.<domain> hosts) here; off by default",
    )
    .option('--e2b-api-key-file <path>', 'e2b API keys, one per line (# comments)')
    .addOption(
      new Option('--e2b-allow-anonymous [bool]', 'serve the e2b API without API keys (development only)')
        .default(false)
        .argParser(bool),
    )
    .option('--e2b-namespace <ns>', 'the namespace whose sandboxes the e2b API creates and serves', 'e2b')
    .option('--e2b-domain <domain>', 'the sandbox domain returned to SDKs (<port>-<id>.<domain> hosts)')
    .option(
      '--e2b-sandbox-tls-cert-file <path>',
      'serve --e2b-sandbox-listen over HTTPS with this certificate (PEM; a *.<e2b-domain> wildcard: the SDK builds https://<port>-<id>.<domain>)',
    )
    .option('--e2b-sandbox-tls-key-file <path>', "the private key (PEM) of --e2b-sandbox-tls-cert-file's certificate")
    .option(
      '--e2b-templates-file <path>',
      'the e2b template alias table (YAML/JSON {templates: {<id>: {template, size?, net?}}}; default: base -> sandbox/base)',
    );
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
  maxConnections: number;
  watchCacheEvents: number;
  enableWarmPoolDriver: boolean;
  enableClaimBinder: boolean;
  disableSandboxEvents: boolean;
  warmPoolSyncInterval: number;
  logLevel: string;
  e2bListen?: string;
  e2bSandboxListen?: string;
  e2bApiKeyFile?: string;
  e2bAllowAnonymous: boolean;
  e2bNamespace: string;
  e2bDomain?: string;
  e2bSandboxTlsCertFile?: string;
  e2bSandboxTlsKeyFile?: string;
  e2bTemplatesFile?: string;
}

function sandboxTls(o: RawOptions, problems: string[]): { certFile: string; keyFile: string } | undefined {
  const { e2bSandboxTlsCertFile: certFile, e2bSandboxTlsKeyFile: keyFile } = o;
  if (!certFile && !keyFile) return undefined;
  if (!certFile || !keyFile) {
    problems.push('--e2b-sandbox-tls-cert-file and --e2b-sandbox-tls-key-file go together');
    return undefined;
  }
  return { certFile, keyFile };
}

function hostPort(flag: string, v: string | undefined, problems: string[]): { host: string; port: number } | undefined {
  if (v === undefined || v === '') return undefined;
  const m = /^(.*):(\d{1,5})$/.exec(v.trim());
  if (!m || Number(m[2]) > 65535) {
    problems.push(`${flag}: "${v}" is not host:port`);
    return undefined;
  }
  return { host: m[1] || '0.0.0.0', port: Number(m[2]) };
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
  const e2bListen = hostPort('--e2b-listen', o.e2bListen, problems);
  const e2bSandboxListen = hostPort('--e2b-sandbox-listen', o.e2bSandboxListen, problems);
  const e2bSandboxTls = sandboxTls(o, problems);
  let apiKeys: string[] = [];
  let templates: TemplateAlias[] = [];
  try {
    if (o.e2bApiKeyFile) apiKeys = readApiKeys(o.e2bApiKeyFile);
    templates = readTemplateAliases(o.e2bTemplatesFile);
  } catch (err) {
    problems.push((err as Error).message);
  }
  if (e2bListen && apiKeys.length === 0 && !o.e2bAllowAnonymous)
    problems.push('--e2b-listen needs --e2b-api-key-file with at least one key (or --e2b-allow-anonymous)');
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
    maxConnections: o.maxConnections,
    watchCacheEvents: o.watchCacheEvents,
    enableWarmPoolDriver: o.enableWarmPoolDriver,
    enableClaimBinder: o.enableClaimBinder,
    disableSandboxEvents: o.disableSandboxEvents,
    warmPoolSyncIntervalMs: o.warmPoolSyncInterval,
    logLevel: o.logLevel,
    e2b: {
      listen: e2bListen,
      sandboxListen: e2bSandboxListen,
      apiKeys,
      allowAnonymous: o.e2bAllowAnonymous,
      namespace: o.e2bNamespace,
      domain: o.e2bDomain || undefined,
      ...(e2bSandboxTls ? { sandboxTls: e2bSandboxTls } : {}),
      templates,
    },
  };
}

/** The defaults, for code that builds a server without parsing argv (tests, `sbx up`). */
export function defaultApiServerConfig(overrides: Partial<ApiServerConfig> = {}): ApiServerConfig {
  const parsed = apiServerCommand().parse([], { from: 'user' }).opts<RawOptions>();
  return { ...toApiServerConfig(parsed), ...overrides };
}
