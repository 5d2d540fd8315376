/**
 * The registry of the HTTP half of test/hostile: every HTTP listener of the project, started in-process the way
 * its daemon starts it (same class, same options), with a request it must keep answering. A new listener is added
 * here once and then gets every case of http-cases.ts (http-listeners.test.ts). Listeners are started lazily, one
 * at a time, and closed by the test.
 *
 * What each entry declares:
 * - `good`: a request that a healthy listener answers with `goodStatus` (no credentials needed, or the refusal
 *   of missing ones: what matters is that the listener still answers);
 * - `headers`: what routes a request to the interesting part (envd: a live sandbox, so a malformed target
 *   reaches the code past the sandbox lookup);
 * - `bodies`: method and path of the JSON bodies it reads, for the wrong-JSON-type cases.
 * The agent half of test/hostile (agent-*.ts) is separate and owned elsewhere.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import type { Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Registry } from 'prom-client';
import { AuthenticatorChain, HEALTH_PATHS, TokenReviewAuthenticator } from '../../src/apiserver/auth/index.js';
import { ApiKeys } from '../../src/apiserver/e2b/api-keys.js';
import { envdAccessToken } from '../../src/api/envd.js';
import { AutoResumer } from '../../src/apiserver/e2b/auto-resume.js';
import { SandboxRouter } from '../../src/apiserver/e2b/router.js';
import { SandboxOps, type OpsDeps } from '../../src/apiserver/e2b/sandbox-ops.js';
import { E2B_ANNOTATIONS } from '../../src/apiserver/e2b/views.js';
import { E2bApi, type E2bApiOptions } from '../../src/apiserver/e2b/server.js';
import { HealthChecks } from '../../src/apiserver/health.js';
import { parseRequestInfo } from '../../src/apiserver/request-info.js';
import { EventLog } from '../../src/apiserver/sandboxes/event-log.js';
import { NodeHttpError, type SandboxdClient } from '../../src/apiserver/sandboxes/sandboxd-client.js';
import type { NodeRow } from '../../src/apiserver/sandboxes/entry.js';
import { SandboxStore } from '../../src/apiserver/sandboxes/store.js';
import { ApiServer } from '../../src/apiserver/server.js';
import type { KubeClient } from '../../src/kube/client.js';
import { Manager } from '../../src/kube/manager.js';
import { silentLogger } from '../../src/log/logger.js';
import { generateBundle } from '../../src/operator/webhook/certs.js';
import { startConversionWebhookServer } from '../../src/operator/webhook/server.js';
import { ClaimGateway } from '../../src/sandboxd/claim-gateway.js';
import type { NodeEngine } from '../../src/sandboxd/engine.js';
import { EnvdServer } from '../../src/sandboxd/envd/server.js';
import { SandboxdApi } from '../../src/sandboxd/http-api.js';
import { KubeletServer } from '../../src/sandboxd/vk/kubelet-server.js';
import type { PodLifecycle } from '../../src/sandboxd/vk/pod-lifecycle.js';
import type { PodLogs } from '../../src/sandboxd/vk/pod-logs.js';
import { simNodeEngine } from '../support/sim-node.js';
import { NO_IDLE } from '../support/engine-stubs.js';

export interface Running {
  port: number;
  /** The server whose open connections are counted (getConnections); absent where the listener hides it. */
  server?: Server;
  close(): Promise<void>;
}

export interface HostileTarget {
  name: string;
  tls: boolean;
  headers?: Record<string, string>;
  good: { method: string; path: string; status: number };
  bodies: Array<{ method: string; path: string; headers?: Record<string, string> }>;
  start(): Promise<Running>;
}

/** A KubeClient whose TokenReviews say "unknown token" after `delayMs`, counting them (and the most at once). */
export function fakeReviewClient(delayMs = 20) {
  const stats = { reviews: 0, inFlight: 0, maxInFlight: 0 };
  const client = {
    stats,
    derive: () => client,
    create: async (_rt: unknown, obj: { kind: string }) => {
      stats.reviews++;
      stats.inFlight++;
      stats.maxInFlight = Math.max(stats.maxInFlight, stats.inFlight);
      await new Promise((r) => setTimeout(r, delayMs));
      stats.inFlight--;
      if (obj.kind === 'TokenReview') return { ...obj, status: { authenticated: false, error: 'unknown token' } };
      return { ...obj, status: { allowed: false, reason: 'fake' } };
    },
  };
  return client as typeof client & KubeClient;
}

const tlsBundle = () =>
  generateBundle({
    serviceName: 'hostile',
    namespace: 'test',
    clusterDomain: 'cluster.local',
    extraSans: ['127.0.0.1'],
  });

export function startApiServer(opts: { client?: KubeClient; maxConnections?: number } = {}): Promise<Running> {
  const tls = tlsBundle();
  const authenticator = new AuthenticatorChain([new TokenReviewAuthenticator(opts.client ?? fakeReviewClient())], {
    anonymous: { paths: HEALTH_PATHS },
  });
  const api = new ApiServer({
    tls: { cert: tls.certPem, key: tls.keyPem },
    authenticator,
    authorizer: { authorize: () => ({ allowed: true, reason: '' }) },
    requestInfo: parseRequestInfo,
    storages: new Map(),
    documents: [],
    health: new HealthChecks(),
    registry: new Registry(),
    logger: silentLogger,
    ...(opts.maxConnections ? { maxConnections: opts.maxConnections } : {}),
  });
  return api.listen('127.0.0.1', 0).then((a) => ({ port: a.port, server: api.server, close: () => api.close() }));
}

/** A node engine on the simulated VMM driver (no VM is started: the listeners are hit before any VM matters). */
export async function simEngine(): Promise<{ engine: NodeEngine; dir: string; close(): Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), 'sbx-hostile-'));
  const { engine } = simNodeEngine(dir, { nodeName: 'hostile-node', cloneMs: 0 });
  await engine.start();
  return {
    engine,
    dir,
    close: async () => {
      await engine.close({ destroyVms: true });
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** The claim id envd's fake engine holds (a request naming it gets past the sandbox lookup). */
export const LIVE_SANDBOX = 'hostile-live';

/**
 * What envd asks of its engine, for one sandbox that exists: the lookup succeeds, so malformed targets and bodies
 * reach the code past it; anything that needs the VM fails as a missing VM does.
 */
function fakeEnvdEngine(): NodeEngine {
  const record = { id: LIVE_SANDBOX, token: 'hostile-token', object: {}, hibernated: false };
  return {
    on: () => undefined,
    get: (id: string) => (id === LIVE_SANDBOX ? record : undefined),
    vm: (id: string) => {
      throw new Error(`sandbox ${id} has no VM in this test`);
    },
    idle: NO_IDLE,
  } as unknown as NodeEngine;
}

const ROOT = 'hostile-root-token';

/** A paused sandbox with autoResume, as the e2b router's store holds it (e2b-router-auto-resume). */
const PAUSED_SANDBOX = 'ipausedautoresume';
const PAUSED_TOKEN = 'hostile-sandboxd-token';
function pausedRow(): NodeRow {
  const now = new Date().toISOString();
  return {
    id: 'hostile-paused-claim',
    key: { template: 'sandbox/base', net: 'none', size: 'small' },
    deadline: now,
    claimed_at: now,
    hibernated: false,
    phase: 'Paused',
    rv: 1,
    claim_ref: `e2b/${PAUSED_SANDBOX}`,
    object: {
      metadata: {
        name: PAUSED_SANDBOX,
        namespace: 'e2b',
        uid: 'hostile-uid',
        creationTimestamp: now,
        annotations: { [E2B_ANNOTATIONS.autoResume]: 'true' },
      },
      spec: { podTemplate: { spec: { containers: [{ name: 'sandbox', image: 'sandbox/base' }] } } },
    } as NodeRow['object'],
  };
}

export const targets: HostileTarget[] = [
  {
    name: 'sandbox-apiserver',
    tls: true,
    good: { method: 'GET', path: '/healthz', status: 200 },
    bodies: [{ method: 'POST', path: '/apis/agents.x-k8s.io/v1beta1/namespaces/a/sandboxes' }],
    start: () => startApiServer(),
  },
  {
    name: 'e2b-api',
    tls: false,
    headers: { 'x-api-key': 'hostile-key' },
    good: { method: 'GET', path: '/health', status: 204 },
    bodies: [
      { method: 'POST', path: '/sandboxes' },
      { method: 'POST', path: '/sandboxes/x/timeout' },
      { method: 'PUT', path: '/sandboxes/x/network' },
    ],
    start: async () => {
      const api = new E2bApi({
        storage: {},
        store: new SandboxStore(silentLogger, new EventLog(8)),
        fleet: {},
        client: {},
        keys: new ApiKeys(['hostile-key'], false),
        templates: [],
        namespace: 'e2b',
        domain: undefined,
        logger: silentLogger,
      } as unknown as E2bApiOptions);
      const a = await api.listen('127.0.0.1', 0);
      return { port: a.port, server: api.server, close: () => api.close() };
    },
  },
  {
    name: 'e2b-router',
    tls: false,
    headers: { 'e2b-sandbox-id': 'nope' },
    good: { method: 'GET', path: '/', status: 502 },
    bodies: [{ method: 'POST', path: '/process.Process/Start' }],
    start: async () => {
      const router = new SandboxRouter({
        store: new SandboxStore(silentLogger, new EventLog(8)),
        client: {} as SandboxdClient,
        namespace: 'e2b',
        logger: silentLogger,
      });
      const a = await router.listen('127.0.0.1', 0);
      return { port: a.port, server: router.server, close: () => router.close() };
    },
  },
  {
    // The router's auto-resume path (src/apiserver/e2b/auto-resume.ts): every request names a paused sandbox with
    // autoResume and carries its token, so each one reads the node's row, joins or starts a resume, and is answered
    // the 502 of a resume that failed (the stand-in node fails every resume).
    name: 'e2b-router-auto-resume',
    tls: false,
    headers: { 'e2b-sandbox-id': PAUSED_SANDBOX, 'x-access-token': envdAccessToken(PAUSED_TOKEN) },
    good: { method: 'GET', path: '/', status: 502 },
    bodies: [{ method: 'POST', path: '/process.Process/Start' }],
    start: async () => {
      const store = new SandboxStore(silentLogger, new EventLog(8));
      const row = pausedRow();
      store.upsert('hostile-node', '127.0.0.1:1', row);
      const client = {
        call: async (_n: string, _a: string, method: string, path: string) => {
          if (method === 'GET' && path === `/v1/sandboxes/${row.id}`) return { ...row, token: PAUSED_TOKEN };
          await new Promise((r) => setTimeout(r, 5));
          throw new NodeHttpError('hostile-node', 503, `${method} ${path}: the stand-in node fails every resume`);
        },
      } as unknown as SandboxdClient;
      const ops = new SandboxOps({ store, client, namespace: 'e2b', log: silentLogger } as unknown as OpsDeps);
      const router = new SandboxRouter({
        store,
        client,
        namespace: 'e2b',
        logger: silentLogger,
        autoResume: new AutoResumer({ ops, logger: silentLogger }),
      });
      const a = await router.listen('127.0.0.1', 0);
      return { port: a.port, server: router.server, close: () => router.close() };
    },
  },
  {
    name: 'sandboxd-api',
    tls: false,
    headers: { authorization: `Bearer ${ROOT}` },
    good: { method: 'GET', path: '/healthz', status: 200 },
    bodies: [
      { method: 'POST', path: '/v1/claim' },
      { method: 'POST', path: '/v1/sandboxes/x/exec' },
      { method: 'PUT', path: '/v1/sandboxes/x/network' },
      // The peer route of checkpoint replicas (docs/placement.md "Replicas"): it reads no body, which it must survive.
      { method: 'POST', path: '/v1/checkpoints/ck_0123456789abcdef/replicate' },
    ],
    start: async () => {
      const sim = await simEngine();
      const api = new SandboxdApi({
        engine: sim.engine,
        auth: { rootToken: ROOT, tenants: new Map(), allowAnonymous: false },
      });
      const a = await api.listen('127.0.0.1', 0);
      return {
        port: a.port,
        server: api.server,
        close: async () => {
          await api.close();
          await sim.close();
        },
      };
    },
  },
  {
    name: 'claim-listener',
    tls: false,
    headers: { authorization: `Bearer ${ROOT}` },
    good: { method: 'POST', path: '/v1/claim', status: 400 }, // root token, no body
    bodies: [{ method: 'POST', path: '/v1/claim' }],
    start: async () => {
      const sim = await simEngine();
      const auth = { rootToken: ROOT, tenants: new Map(), allowAnonymous: false };
      const api = new SandboxdApi({ engine: sim.engine, auth });
      const gw = new ClaimGateway({ api, auth });
      const a = await gw.listen('127.0.0.1', 0);
      return {
        port: a.port,
        server: gw.server,
        close: async () => {
          await gw.close();
          await api.close();
          await sim.close();
        },
      };
    },
  },
  {
    name: 'envd',
    tls: false,
    headers: { 'e2b-sandbox-id': LIVE_SANDBOX },
    good: { method: 'GET', path: '/health', status: 204 },
    bodies: [
      { method: 'POST', path: '/process.Process/Start', headers: { 'content-type': 'application/json' } },
      { method: 'POST', path: '/files?path=/tmp/x' },
    ],
    start: async () => {
      const envd = new EnvdServer({ engine: fakeEnvdEngine(), logger: silentLogger });
      const a = await envd.listen('127.0.0.1', 0);
      return { port: a.port, server: envd.server, close: () => envd.close() };
    },
  },
  {
    name: 'kubelet-api',
    tls: true,
    good: { method: 'GET', path: '/healthz', status: 401 },
    bodies: [{ method: 'POST', path: '/run/a/b/c' }],
    start: async () => {
      const tls = tlsBundle();
      const kubelet = new KubeletServer({
        nodeName: 'hostile-vk',
        listenAddress: '127.0.0.1',
        port: 0,
        tls: { cert: tls.certPem, key: tls.keyPem, clientCa: tls.caPem },
        engine: {} as NodeEngine,
        pods: {} as PodLifecycle,
        logs: {} as PodLogs,
        logger: silentLogger,
      });
      const port = await kubelet.listen();
      return { port, server: (kubelet as unknown as { server: Server }).server, close: () => kubelet.close() };
    },
  },
  {
    name: 'operator-webhook',
    tls: true,
    good: { method: 'GET', path: '/healthz', status: 200 },
    bodies: [{ method: 'POST', path: '/convert' }],
    start: async () => {
      const hook = await startConversionWebhookServer({
        port: 0,
        host: '127.0.0.1',
        tls: tlsBundle(),
        logger: silentLogger,
      });
      return { port: hook.port, close: () => hook.close() };
    },
  },
  {
    name: 'operator-metrics',
    tls: false,
    good: { method: 'GET', path: '/healthz', status: 200 },
    bodies: [{ method: 'POST', path: '/metrics' }],
    start: async () => {
      const stop = new AbortController();
      const manager = new Manager({
        client: {} as KubeClient,
        metricsBindAddress: '127.0.0.1:0',
        healthBindAddress: '127.0.0.1:0',
        logger: silentLogger,
      });
      const started = manager.start(stop.signal).catch(() => undefined);
      while (!manager.boundAddresses.health) await new Promise((r) => setTimeout(r, 10));
      const port = Number(manager.boundAddresses.health.split(':').pop());
      const server = (manager as unknown as { servers: Server[] }).servers.at(-1)!;
      return {
        port,
        server,
        close: async () => {
          stop.abort();
          await started;
        },
      };
    },
  },
];
